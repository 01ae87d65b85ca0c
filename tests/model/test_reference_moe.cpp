#include <doctest/doctest.h>

#include <cmath>

#include "model/reference/latent_moe.hpp"
#include "reference_test_util.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::reference;
using kiln_test::Matrix;
using kiln_test::Rng;
using kiln_test::Vec;
using doctest::Approx;

namespace {

float logit(double p) { return float(std::log(p / (1 - p))); }

double glu64(const GluActivation& act, double g, double u) {
    if (act.kind == GluActivation::Kind::silu) return g * kiln_test::sigmoid64(g) * u;
    double up = act.linear_beta ? *act.linear_beta * std::tanh(u / *act.linear_beta) : u;
    return act.beta * std::tanh(g / act.beta) * kiln_test::sigmoid64(g) * up;
}

Vec mlp64(const MlpWeights& w, const GluActivation& act, const Vec& x) {
    Vec g = kiln_test::matvec64(w.gate, x), u = kiln_test::matvec64(w.up, x);
    for (size_t i = 0; i < g.size(); ++i) g[i] = glu64(act, g[i], u[i]);
    return kiln_test::matvec64(w.down, g);
}

Vec expert64(const ExpertWeights& e, const GluActivation& act, const Vec& z) {
    return mlp64(MlpWeights{e.w1, e.w3, e.w2}, act, z);
}

// fp64 LatentMoE from k3-model.md §5, routing included (DeepSeek-V3 semantics).
Matrix naive_moe(const LatentMoeWeights& w, const LatentMoeDims& d, const Matrix& h) {
    Matrix out(h.rows, d.hidden);
    const size_t E = d.router.num_experts, k = d.router.top_k;
    for (size_t t = 0; t < h.rows; ++t) {
        Vec x = kiln_test::to64(h.row(t), d.hidden);
        Vec logits = kiln_test::matvec64(w.router.gate, x), s(E), choice(E);
        for (size_t e = 0; e < E; ++e) {
            s[e] = kiln_test::sigmoid64(logits[e]);
            choice[e] = s[e] + (w.router.score_bias.empty() ? 0.0 : w.router.score_bias[e]);
        }
        std::vector<size_t> chosen;
        std::vector<bool> used(E, false);
        for (size_t j = 0; j < k; ++j) {
            size_t best = E;
            for (size_t e = 0; e < E; ++e)
                if (!used[e] && (best == E || choice[e] > choice[best])) best = e;
            used[best] = true;
            chosen.push_back(best);
        }
        double sum = 0;
        for (size_t e : chosen) sum += s[e];
        Vec z = d.latent ? kiln_test::matvec64(w.down_proj, x) : x;
        Vec y(z.size(), 0.0);
        for (size_t e : chosen) {
            double g = (d.router.renormalize ? s[e] / (sum + 1e-20) : s[e]) * d.router.routed_scaling_factor;
            Vec ye = expert64(w.experts[e], d.act, z);
            for (size_t i = 0; i < y.size(); ++i) y[i] += g * ye[i];
        }
        if (d.latent_norm) y = kiln_test::rmsnorm64(y, w.latent_norm, d.norm_eps);
        Vec o = d.latent ? kiln_test::matvec64(w.up_proj, y) : y;
        if (d.shared_inter) {
            Vec sh = mlp64(w.shared, d.act, x);
            for (size_t i = 0; i < o.size(); ++i) o[i] += sh[i];
        }
        for (size_t i = 0; i < d.hidden; ++i) out.at(t, i) = float(o[i]);
    }
    return out;
}

LatentMoeWeights random_moe(Rng& rng, const LatentMoeDims& d) {
    LatentMoeWeights w;
    w.router.gate = rng.weight(d.router.num_experts, d.hidden);
    w.router.score_bias = rng.vec(d.router.num_experts, -0.1f, 0.1f);
    const size_t in = d.expert_in();
    if (d.latent) {
        w.down_proj = rng.weight(d.latent, d.hidden);
        w.up_proj = rng.weight(d.hidden, d.latent);
    }
    if (d.latent_norm) w.latent_norm = rng.vec(in, 0.5f, 1.5f);
    for (size_t e = 0; e < d.router.num_experts; ++e)
        w.experts.push_back({rng.weight(d.expert_inter, in), rng.weight(d.expert_inter, in), rng.weight(in, d.expert_inter)});
    if (d.shared_inter)
        w.shared = {rng.weight(d.shared_inter, d.hidden), rng.weight(d.shared_inter, d.hidden), rng.weight(d.hidden, d.shared_inter)};
    w.validate(d);
    return w;
}

}  // namespace

TEST_CASE("router: the bias picks the experts, the weights stay unbiased") {
    // d = 1, h = [1]: logits are the gate column, scores s = [0.9, 0.8, 0.3, 0.2].
    RouterWeights w{Matrix(4, 1, {logit(0.9), logit(0.8), logit(0.3), logit(0.2)}), {0.0f, 0.0f, 0.7f, 0.0f}};
    RouterConfig cfg{4, 2, true, 2.0f};
    Routing r = route(w, cfg, Matrix(1, 1, {1.0f}));
    // Biased choice [0.9, 0.8, 1.0, 0.2] → experts 2 then 0 (the bias changed the selection: 1 drops out).
    REQUIRE(r.ids.size() == 2);
    CHECK(r.ids[0] == 2);
    CHECK(r.ids[1] == 0);
    // Weights from the unbiased scores: 0.3 / 1.2 and 0.9 / 1.2, times 2.0.
    CHECK(r.weights[0] == Approx(0.5));
    CHECK(r.weights[1] == Approx(1.5));
    // (Mixing the bias into the weights would give 2·1.0/1.9 and 2·0.9/1.9.)
    CHECK(r.weights[0] != Approx(2.0 / 1.9));

    // Without renormalisation the raw scores are scaled.
    cfg.renormalize = false;
    r = route(w, cfg, Matrix(1, 1, {1.0f}));
    CHECK(r.weights[0] == Approx(0.6));
    CHECK(r.weights[1] == Approx(1.8));

    // Without a bias the plain top-2 is 0 and 1.
    w.score_bias.clear();
    r = route(w, cfg, Matrix(1, 1, {1.0f}));
    CHECK(r.ids[0] == 0);
    CHECK(r.ids[1] == 1);
    CHECK_THROWS_AS(route(w, RouterConfig{4, 5, true, 1.0f}, Matrix(1, 1, {1.0f})), kiln::InvalidArgument);
}

TEST_CASE("routed experts: SiTU-GLU experts weighted and summed (hand check)") {
    // ℓ = 2, I = 2; expert 0: w1 = I, w3 = 2I, w2 = I; expert 1: w1 = -I, w3 = I, w2 = 3I.
    std::vector<ExpertWeights> ex{
        {Matrix(2, 2, {1, 0, 0, 1}), Matrix(2, 2, {2, 0, 0, 2}), Matrix(2, 2, {1, 0, 0, 1})},
        {Matrix(2, 2, {-1, 0, 0, -1}), Matrix(2, 2, {1, 0, 0, 1}), Matrix(2, 2, {3, 0, 0, 3})}};
    Matrix z(1, 2, {0.5f, -1.0f});
    std::vector<int32_t> ids{1, 0};
    std::vector<float> wts{0.25f, 0.75f};
    Matrix out = routed_experts(ex, GluActivation::situ(), z, ids, wts, 2);
    for (size_t c = 0; c < 2; ++c) {
        double zc = z.at(0, c);
        double e0 = situ(float(zc), float(2 * zc), 4, 25);
        double e1 = 3 * double(situ(float(-zc), float(zc), 4, 25));
        CHECK(out.at(0, c) == Approx(0.75 * e0 + 0.25 * e1));
    }
    std::vector<int32_t> bad{1, 2};
    CHECK_THROWS_AS(routed_experts(ex, GluActivation::situ(), z, bad, wts, 2), kiln::InvalidArgument);
}

TEST_CASE("routed experts match fp64 on random inputs") {
    Rng rng(31);
    const size_t E = 5, l = 6, I = 4, T = 7, k = 3;
    std::vector<ExpertWeights> ex;
    for (size_t e = 0; e < E; ++e) ex.push_back({rng.weight(I, l), rng.weight(I, l), rng.weight(l, I)});
    Matrix z = rng.mat(T, l, 3.0f);
    std::vector<int32_t> ids;
    std::vector<float> wts = rng.vec(T * k, 0.1f, 1.0f);
    for (size_t t = 0; t < T; ++t)
        for (size_t j = 0; j < k; ++j) ids.push_back(int32_t((t + 2 * j) % E));
    Matrix out = routed_experts(ex, GluActivation::situ(), z, ids, wts, k);
    std::vector<double> expect;
    for (size_t t = 0; t < T; ++t) {
        Vec acc(l, 0.0);
        for (size_t j = 0; j < k; ++j) {
            Vec y = expert64(ex[size_t(ids[t * k + j])], GluActivation::situ(), kiln_test::to64(z.row(t), l));
            for (size_t c = 0; c < l; ++c) acc[c] += wts[t * k + j] * y[c];
        }
        expect.insert(expect.end(), acc.begin(), acc.end());
    }
    CHECK(kiln_test::rel_err(out.data, expect) < 1e-6);
}

TEST_CASE("dense GLU MLP (hand check)") {
    MlpWeights w{Matrix(1, 2, {1, 1}), Matrix(1, 2, {2, -1}), Matrix(2, 1, {1, -2})};
    Matrix x(1, 2, {0.5f, 1.0f});
    Matrix y = glu_mlp(w, GluActivation::situ(), x);
    double a = situ(1.5f, 0.0f, 4, 25);
    CHECK(y.at(0, 0) == Approx(a));
    x = Matrix(1, 2, {1.0f, 0.5f});
    y = glu_mlp(w, GluActivation::silu(), x);
    double g = 1.5, u = 1.5;
    CHECK(y.at(0, 0) == Approx(g / (1 + std::exp(-g)) * u));
    CHECK(y.at(0, 1) == Approx(-2 * g / (1 + std::exp(-g)) * u));
}

TEST_CASE("latent MoE (K3 form) matches fp64: latent down/up, latent norm, shared experts") {
    Rng rng(41);
    LatentMoeDims d;
    d.hidden = 8;
    d.latent = 5;
    d.expert_inter = 6;
    d.shared_inter = 2 * 6;
    d.latent_norm = true;
    d.router = {6, 2, true, 1.0f};
    d.act = GluActivation::situ();
    LatentMoeWeights w = random_moe(rng, d);
    Matrix h = rng.mat(9, d.hidden, 2.0f);
    CHECK(kiln_test::rel_err(latent_moe_forward(w, d, h), naive_moe(w, d, h)) < 1e-5);
}

TEST_CASE("MoE without a latent (Kimi-Linear-48B form) matches fp64") {
    Rng rng(43);
    LatentMoeDims d;
    d.hidden = 6;
    d.latent = 0;
    d.expert_inter = 4;
    d.shared_inter = 4;
    d.latent_norm = false;
    d.router = {8, 3, true, 2.446f};
    d.act = GluActivation::silu();
    LatentMoeWeights w = random_moe(rng, d);
    Matrix h = rng.mat(5, d.hidden, 2.0f);
    CHECK(kiln_test::rel_err(latent_moe_forward(w, d, h), naive_moe(w, d, h)) < 1e-5);
}

TEST_CASE("MoE weights are validated") {
    Rng rng(1);
    LatentMoeDims d;
    d.hidden = 4;
    d.latent = 3;
    d.expert_inter = 2;
    d.router = {3, 1, true, 1.0f};
    LatentMoeWeights w = random_moe(rng, d);
    w.experts.pop_back();
    CHECK_THROWS_AS(w.validate(d), kiln::InvalidArgument);
}
