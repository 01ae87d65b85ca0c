// Helpers shared by the reference-model tests: seeded random fills (never zeros) and error metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "model/reference/tensor_ops.hpp"

namespace kiln_test {

using kiln::model::reference::Matrix;

struct Rng {
    std::mt19937_64 gen;
    explicit Rng(uint64_t seed) : gen(seed) {}
    // Uniform in [lo, hi], never exactly zero.
    float uniform(float lo, float hi) {
        std::uniform_real_distribution<float> d(lo, hi);
        float v;
        do v = d(gen);
        while (v == 0.0f);
        return v;
    }
    std::vector<float> vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
        std::vector<float> v(n);
        for (auto& x : v) x = uniform(lo, hi);
        return v;
    }
    Matrix mat(size_t r, size_t c, float scale) { return Matrix(r, c, vec(r * c, -scale, scale)); }
    // A weight [out, in] with entries ~ U(-1,1)/sqrt(in).
    Matrix weight(size_t out, size_t in) { return mat(out, in, float(1.0 / std::sqrt(double(in)))); }
};

// max |a - b| / max(max |b|, tiny): a relative error over the whole tensor.
inline double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
        num = std::max(num, std::abs(double(a[i]) - b[i]));
        den = std::max(den, std::abs(b[i]));
    }
    return num / std::max(den, 1e-30);
}
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    return rel_err(a, std::vector<double>(b.begin(), b.end()));
}
inline double rel_err(const Matrix& a, const Matrix& b) { return rel_err(a.data, b.data); }

inline Matrix rows(const Matrix& m, size_t begin, size_t end) {
    Matrix out(end - begin, m.cols);
    std::copy(m.row(begin), m.row(begin) + (end - begin) * m.cols, out.data.begin());
    return out;
}

inline Matrix poisoned(size_t r, size_t c) { return Matrix(r, c, std::numeric_limits<float>::quiet_NaN()); }

// fp64 dense helpers for the independent reference implementations inside the tests.
using Vec = std::vector<double>;
inline Vec matvec64(const Matrix& W, const Vec& x) {
    Vec y(W.rows, 0.0);
    for (size_t o = 0; o < W.rows; ++o)
        for (size_t i = 0; i < W.cols; ++i) y[o] += double(W.at(o, i)) * x[i];
    return y;
}
inline Vec to64(const float* p, size_t n) { return Vec(p, p + n); }
inline double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline Vec rmsnorm64(const Vec& x, const std::vector<float>& w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (w.empty() ? 1.0 : double(w[i]));
    return y;
}

}  // namespace kiln_test
