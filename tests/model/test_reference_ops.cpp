#include <doctest/doctest.h>

#include <cmath>

#include "model/reference/situ.hpp"
#include "model/reference/tensor_ops.hpp"
#include "reference_test_util.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::reference;
using doctest::Approx;

TEST_CASE("matvec: y = W x with W [out, in]") {
    Matrix W(2, 3, {1, 2, 3, -1, 0.5f, 4});
    std::vector<float> x{2, -1, 0.5f};
    auto y = matvec(W, x);
    CHECK(y[0] == Approx(1 * 2 - 2 + 1.5));
    CHECK(y[1] == Approx(-2 - 0.5 + 2));
    CHECK_THROWS_AS(matvec(W, std::vector<float>{1, 2}), kiln::InvalidArgument);
}

TEST_CASE("linear applies the weight to every row") {
    kiln_test::Rng rng(1);
    Matrix W = rng.weight(5, 4), X = rng.mat(3, 4, 1.0f);
    Matrix Y = linear(W, X);
    for (size_t t = 0; t < 3; ++t) {
        auto ref = kiln_test::matvec64(W, kiln_test::to64(X.row(t), 4));
        for (size_t o = 0; o < 5; ++o) CHECK(Y.at(t, o) == Approx(ref[o]).epsilon(1e-6));
    }
}

TEST_CASE("rmsnorm: x / sqrt(mean(x^2) + eps) * w") {
    float x[2] = {3, 4}, w[2] = {1, 2}, y[2];
    rmsnorm(x, w, 2, 0.0f, y);
    double rms = std::sqrt(12.5);
    CHECK(y[0] == Approx(3 / rms));
    CHECK(y[1] == Approx(8 / rms));
    // eps is added to the mean square: for a tiny input it dominates.
    float tiny[2] = {1e-3f, 1e-3f};
    rmsnorm(tiny, nullptr, 2, 1e-6f, y);
    CHECK(y[0] == Approx(1e-3 / std::sqrt(1e-6 + 1e-6)));
}

TEST_CASE("l2norm puts eps inside the square root") {
    float x[2] = {1e-3f, 0.0f};
    l2norm_inplace(x, 2, 1e-6f);
    // 1e-3 / sqrt(1e-6 + 1e-6) = 0.7071; eps outside (x / (|x| + eps)) would give 0.999.
    CHECK(x[0] == Approx(1.0 / std::sqrt(2.0)).epsilon(1e-5));
    float y[3] = {3, 0, 4};
    l2norm_inplace(y, 3, 1e-6f);
    CHECK(y[2] == Approx(4 / std::sqrt(25 + 1e-6)));
}

TEST_CASE("scalar activations") {
    CHECK(sigmoid(0.0f) == Approx(0.5));
    CHECK(sigmoid(2.0f) == Approx(1 / (1 + std::exp(-2.0))));
    CHECK(softplus(0.0f) == Approx(std::log(2.0)));
    CHECK(softplus(50.0f) == Approx(50.0));
    CHECK(std::isfinite(softplus(200.0f)));
    CHECK(softplus(-30.0f) == Approx(std::exp(-30.0)).epsilon(1e-3));
    CHECK(silu(1.5f) == Approx(1.5 / (1 + std::exp(-1.5))));
}

TEST_CASE("softmax is stable for large logits") {
    float x[3] = {1000, 1001, 999};
    softmax_inplace(x, 3);
    double e0 = std::exp(-1.0), e2 = std::exp(-2.0), s = e0 + 1 + e2;
    CHECK(x[0] == Approx(e0 / s));
    CHECK(x[1] == Approx(1 / s));
    CHECK(x[2] == Approx(e2 / s));
}

TEST_CASE("SiTU: beta tanh(g/beta) sigmoid(g) * beta_lin tanh(u/beta_lin)") {
    auto expect = [](double g, double u, double b, double bl) {
        return b * std::tanh(g / b) / (1 + std::exp(-g)) * bl * std::tanh(u / bl);
    };
    CHECK(situ(2.0f, 10.0f, 4.0f, 25.0f) == Approx(expect(2, 10, 4, 25)));
    CHECK(situ(-1.5f, -3.0f, 4.0f, 25.0f) == Approx(expect(-1.5, -3, 4, 25)));
    // The caps: gate branch saturates at beta, up branch at beta_lin.
    CHECK(situ(100.0f, 1000.0f, 4.0f, 25.0f) == Approx(100.0).epsilon(1e-4));
    // No linear beta: the up branch is passed through.
    CHECK(situ(2.0f, 1000.0f, 4.0f, std::nullopt) == Approx(4 * std::tanh(0.5) / (1 + std::exp(-2.0)) * 1000));
    // Large beta tends to SwiGLU.
    CHECK(situ(1.0f, 2.0f, 1e6f, 1e6f) == Approx(1.0 / (1 + std::exp(-1.0)) * 2).epsilon(1e-5));
}

TEST_CASE("glu dispatches SiTU and SiLU") {
    float g[2] = {0.7f, -2.0f}, u[2] = {3.0f, 0.5f}, out[2] = {NAN, NAN};
    glu(GluActivation::situ(), g, u, 2, out);
    CHECK(out[0] == Approx(situ(0.7f, 3.0f, 4.0f, 25.0f)));
    CHECK(out[1] == Approx(situ(-2.0f, 0.5f, 4.0f, 25.0f)));
    glu(GluActivation::silu(), g, u, 2, out);
    CHECK(out[0] == Approx(0.7 / (1 + std::exp(-0.7)) * 3.0));
    CHECK(out[1] == Approx(-2.0 / (1 + std::exp(2.0)) * 0.5));
}
