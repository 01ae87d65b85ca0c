#include <doctest/doctest.h>

#include <cmath>

#include "model/reference/attn_res.hpp"
#include "reference_test_util.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::reference;
using kiln_test::Matrix;
using kiln_test::Rng;
using kiln_test::Vec;
using doctest::Approx;

TEST_CASE("attn_res mixes the raw candidates with softmax over normalised scores (hand check)") {
    // V0 = [1, 0], V1 = [10, 10]; γ = [1, 1], w = [1, 0].
    // Normalised: V0/rms = [√2, 0] → s0 = √2;  V1/rms = [1, 1] → s1 = 1.
    float v0[2] = {1, 0}, v1[2] = {10, 10};
    const float* cand[2] = {v0, v1};
    AttnResSite site{{1, 0}, {1, 1}};
    float out[2] = {NAN, NAN};
    attn_res_mix(cand, 2, 2, site, 0.0f, out);
    double e0 = std::exp(std::sqrt(2.0)), e1 = std::exp(1.0);
    double a0 = e0 / (e0 + e1), a1 = e1 / (e0 + e1);
    CHECK(out[0] == Approx(a0 * 1 + a1 * 10));
    CHECK(out[1] == Approx(a1 * 10));
    // Mixing the normalised candidates instead would give [a0·√2 + a1, a1]: far from the raw mix.
    CHECK(std::abs(out[1] - a1) > 1.0);
}

TEST_CASE("attn_res: eps and the norm weight enter the score") {
    float v0[2] = {3, 4}, v1[2] = {-1, 2};
    const float* cand[2] = {v0, v1};
    AttnResSite site{{0.5f, -1.0f}, {2.0f, 0.25f}};
    float out[2];
    const float eps = 0.1f;
    attn_res_mix(cand, 2, 2, site, eps, out);
    auto score = [&](const float* v) {
        double inv = 1 / std::sqrt((v[0] * v[0] + v[1] * v[1]) / 2.0 + eps);
        return v[0] * inv * 2.0 * 0.5 + v[1] * inv * 0.25 * -1.0;
    };
    double s0 = score(v0), s1 = score(v1), m = std::max(s0, s1);
    double a0 = std::exp(s0 - m) / (std::exp(s0 - m) + std::exp(s1 - m));
    CHECK(out[0] == Approx(a0 * 3 + (1 - a0) * -1));
    CHECK(out[1] == Approx(a0 * 4 + (1 - a0) * 2));
}

namespace {

// fp64 transcription of the §4.2 loop for one token, with mixers f_l(x) = tanh(A_l x) and
// FFNs m_l(x) = 0.5 x + c_l (no norms: the stream is what is tested).
struct ToyLayer {
    Matrix A;
    Vec c;
    AttnResSite attn, mlp;
};

Vec mix64(const std::vector<Vec>& B, const Vec& P, const AttnResSite& s, double eps) {
    std::vector<Vec> V = B;
    V.push_back(P);
    Vec score;
    for (auto& v : V) {
        double ms = 0;
        for (double x : v) ms += x * x;
        double inv = 1 / std::sqrt(ms / double(v.size()) + eps), acc = 0;
        for (size_t i = 0; i < v.size(); ++i) acc += v[i] * inv * s.norm[i] * s.proj[i];
        score.push_back(acc);
    }
    double mx = *std::max_element(score.begin(), score.end()), sum = 0;
    for (auto& x : score) sum += (x = std::exp(x - mx));
    Vec out(P.size(), 0.0);
    for (size_t i = 0; i < V.size(); ++i)
        for (size_t c = 0; c < P.size(); ++c) out[c] += score[i] / sum * V[i][c];
    return out;
}

Vec toy_mixer(const ToyLayer& L, const Vec& x) {
    Vec y = kiln_test::matvec64(L.A, x);
    for (auto& v : y) v = std::tanh(v);
    return y;
}
Vec toy_ffn(const ToyLayer& L, const Vec& x) {
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = 0.5 * x[i] + L.c[i];
    return y;
}

Vec naive_stack(const std::vector<ToyLayer>& layers, const AttnResSite& out_site, const Vec& emb, size_t bs, double eps) {
    std::vector<Vec> B;
    Vec P = emb;
    bool none = false;
    for (size_t l = 0; l < layers.size(); ++l) {
        Vec X = B.empty() ? P : mix64(B, P, layers[l].attn, eps);
        if (l % bs == 0) B.push_back(P), none = true;
        Vec a = toy_mixer(layers[l], X);
        if (none) P = a, none = false;
        else for (size_t i = 0; i < P.size(); ++i) P[i] += a[i];
        X = mix64(B, P, layers[l].mlp, eps);
        Vec m = toy_ffn(layers[l], X);
        for (size_t i = 0; i < P.size(); ++i) P[i] += m[i];
    }
    return mix64(B, P, out_site, eps);
}

}  // namespace

TEST_CASE("residual stream: block banking, two sites per layer and the output site match §4.2") {
    Rng rng(51);
    const size_t d = 4, L = 7, T = 3;
    const float eps = 1e-5f;
    std::vector<ToyLayer> layers;
    for (size_t l = 0; l < L; ++l)
        layers.push_back({rng.mat(d, d, 1.0f), kiln_test::to64(rng.vec(d).data(), d),
                          {rng.vec(d), rng.vec(d, 0.5f, 1.5f)}, {rng.vec(d), rng.vec(d, 0.5f, 1.5f)}});
    AttnResSite out_site{rng.vec(d), rng.vec(d, 0.5f, 1.5f)};
    Matrix emb = rng.mat(T, d, 1.0f);
    for (size_t bs : {size_t(1), size_t(3), size_t(12)}) {
        CAPTURE(bs);
        ResidualStream rs(emb, bs, eps);
        for (size_t l = 0; l < L; ++l) {
            Matrix X = rs.mixer_input(l, layers[l].attn);
            Matrix a(T, d);
            for (size_t t = 0; t < T; ++t) {
                Vec y = toy_mixer(layers[l], kiln_test::to64(X.row(t), d));
                for (size_t i = 0; i < d; ++i) a.at(t, i) = float(y[i]);
            }
            X = rs.ffn_input(a, layers[l].mlp);
            Matrix m(T, d);
            for (size_t t = 0; t < T; ++t) {
                Vec y = toy_ffn(layers[l], kiln_test::to64(X.row(t), d));
                for (size_t i = 0; i < d; ++i) m.at(t, i) = float(y[i]);
            }
            rs.add_ffn(m);
        }
        CHECK(rs.banked_blocks() == (L + bs - 1) / bs);
        Matrix h = rs.output(out_site);
        for (size_t t = 0; t < T; ++t) {
            Vec expect = naive_stack(layers, out_site, kiln_test::to64(emb.row(t), d), bs, eps);
            CHECK(kiln_test::rel_err(std::vector<float>(h.row(t), h.row(t) + d), expect) < 1e-5);
        }
    }
}

TEST_CASE("residual stream without a block size is the plain residual") {
    Matrix emb(1, 2, {1, 2});
    AttnResSite unused;
    ResidualStream rs(emb, std::nullopt, 1e-5f);
    Matrix x = rs.mixer_input(0, unused);
    CHECK(x.at(0, 1) == 2);
    x = rs.ffn_input(Matrix(1, 2, {0.5f, -1}), unused);
    CHECK(x.at(0, 0) == Approx(1.5));
    CHECK(x.at(0, 1) == Approx(1.0));
    rs.add_ffn(Matrix(1, 2, {2, 2}));
    Matrix h = rs.output(unused);
    CHECK(h.at(0, 0) == Approx(3.5));
    CHECK(h.at(0, 1) == Approx(3.0));
    CHECK(rs.banked_blocks() == 0);
}
