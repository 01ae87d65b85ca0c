#include "model/reference/tensor_ops.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::reference {

Matrix::Matrix(size_t r, size_t c, std::vector<float> values) : rows(r), cols(c), data(std::move(values)) {
    if (data.size() != r * c)
        throw InvalidArgument(fmt::format("matrix [{}, {}] needs {} values, got {}", r, c, r * c, data.size()));
}

void require_shape(const Matrix& m, size_t rows, size_t cols, std::string_view what) {
    if (m.rows != rows || m.cols != cols)
        throw InvalidArgument(fmt::format("{}: expected [{}, {}], got [{}, {}]", what, rows, cols, m.rows, m.cols));
}

double dot(const float* a, const float* b, size_t n) {
    // Four partial sums keep the fp64 chain short enough for the compiler to pipeline it.
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += double(a[i]) * b[i];
        s1 += double(a[i + 1]) * b[i + 1];
        s2 += double(a[i + 2]) * b[i + 2];
        s3 += double(a[i + 3]) * b[i + 3];
    }
    for (; i < n; ++i) s0 += double(a[i]) * b[i];
    return (s0 + s1) + (s2 + s3);
}

void matvec(const Matrix& W, const float* x, float* y) {
    for (size_t o = 0; o < W.rows; ++o) y[o] = static_cast<float>(dot(W.row(o), x, W.cols));
}

std::vector<float> matvec(const Matrix& W, std::span<const float> x) {
    if (x.size() != W.cols)
        throw InvalidArgument(fmt::format("matvec: input has {} values, weight expects {}", x.size(), W.cols));
    std::vector<float> y(W.rows);
    matvec(W, x.data(), y.data());
    return y;
}

Matrix linear(const Matrix& W, const Matrix& X) {
    if (X.cols != W.cols)
        throw InvalidArgument(fmt::format("linear: input has {} columns, weight expects {}", X.cols, W.cols));
    Matrix Y(X.rows, W.rows);
    for (size_t t = 0; t < X.rows; ++t) matvec(W, X.row(t), Y.row(t));
    return Y;
}

void rmsnorm(const float* x, const float* w, size_t n, float eps, float* y) {
    double ss = dot(x, x, n);
    double inv = 1.0 / std::sqrt(ss / double(n) + double(eps));
    for (size_t i = 0; i < n; ++i) {
        double v = double(x[i]) * inv;
        y[i] = static_cast<float>(w ? v * double(w[i]) : v);
    }
}

void l2norm_inplace(float* x, size_t n, float eps) {
    double inv = 1.0 / std::sqrt(dot(x, x, n) + double(eps));
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(double(x[i]) * inv);
}

void softmax_inplace(float* x, size_t n) {
    if (n == 0) return;
    float mx = *std::max_element(x, x + n);
    double sum = 0;
    std::vector<double> e(n);
    for (size_t i = 0; i < n; ++i) sum += (e[i] = std::exp(double(x[i]) - double(mx)));
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[i] / sum);
}

}  // namespace kiln::model::reference
