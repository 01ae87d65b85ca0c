// Plain fp32 building blocks for the reference forward pass: a row-major matrix, y = W x, RMSNorm,
// L2 norm and the scalar activations. Storage is fp32; every dot product and sum of squares is
// accumulated in fp64 and rounded once, so results do not depend on how a caller batches tokens.
// Shapes follow nn.Linear: a weight W is [out, in] and y = W x. Nothing here is tuned for speed.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace kiln::model::reference {

// Row-major [rows, cols] fp32 matrix. Also used for sequences: one row per token.
struct Matrix {
    size_t rows = 0;
    size_t cols = 0;
    std::vector<float> data;

    Matrix() = default;
    Matrix(size_t r, size_t c, float fill = 0.0f) : rows(r), cols(c), data(r * c, fill) {}
    Matrix(size_t r, size_t c, std::vector<float> values);

    float* row(size_t r) { return data.data() + r * cols; }
    const float* row(size_t r) const { return data.data() + r * cols; }
    std::span<float> row_span(size_t r) { return {row(r), cols}; }
    std::span<const float> row_span(size_t r) const { return {row(r), cols}; }
    float& at(size_t r, size_t c) { return data[r * cols + c]; }
    float at(size_t r, size_t c) const { return data[r * cols + c]; }
    bool empty() const { return data.empty(); }
};

// Throws InvalidArgument "<what>: expected [r, c], got [R, C]" unless m has that shape.
void require_shape(const Matrix& m, size_t rows, size_t cols, std::string_view what);

// fp64-accumulated dot product of two length-n fp32 vectors.
double dot(const float* a, const float* b, size_t n);

// y[W.rows] = W x (x has W.cols values).
void matvec(const Matrix& W, const float* x, float* y);
std::vector<float> matvec(const Matrix& W, std::span<const float> x);

// Y[T, W.rows] = X[T, W.cols] Wᵀ: the linear layer applied to every row of X.
Matrix linear(const Matrix& W, const Matrix& X);

// y = x / sqrt(mean(x²) + eps) ⊙ w   (w may be null: no scale). y may alias x.
void rmsnorm(const float* x, const float* w, size_t n, float eps, float* y);

// x ← x / sqrt(||x||² + eps)   (eps inside the square root, as fla's l2norm).
void l2norm_inplace(float* x, size_t n, float eps);

inline float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }
inline float silu(float x) { return x * sigmoid(x); }
// log(1 + e^x) without overflow for large x.
inline float softplus(float x) {
    double d = x;
    return static_cast<float>(d > 20.0 ? d + std::log1p(std::exp(-d)) : std::log1p(std::exp(d)));
}

// Numerically stable softmax in place over n values (fp64 internally).
void softmax_inplace(float* x, size_t n);

}  // namespace kiln::model::reference
