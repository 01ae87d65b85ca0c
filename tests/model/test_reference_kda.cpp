#include <doctest/doctest.h>

#include <cmath>

#include "model/reference/kda.hpp"
#include "reference_test_util.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::reference;
using kiln_test::Matrix;
using kiln_test::Rng;
using kiln_test::Vec;
using doctest::Approx;

namespace {

enum class GateForm { safe, softplus, clamp_wrong };

// Independent fp64 KDA layer, token by token from a zero state, written from k3-model.md §1.2.
// per_channel_alog and GateForm::clamp_wrong are the known-wrong readings, used to show the tests
// discriminate.
struct NaiveKda {
    bool per_channel_alog = false;
    GateForm form = GateForm::safe;

    Matrix run(const KdaWeights& w, const KdaDims& d, const Matrix& x) const {
        const size_t T = x.rows, H = d.heads, K = d.head_dim, W = d.width(), taps = d.conv_kernel;
        std::vector<Vec> uq, uk, uv;  // projected inputs of all tokens
        std::vector<Vec> S(H, Vec(K * K, 0.0));
        Matrix y(T, d.hidden);
        auto conv = [&](const std::vector<Vec>& u, const Matrix& cw, size_t t, size_t c) {
            double acc = 0;
            for (size_t j = 0; j < taps; ++j) {
                long src = long(t) - long(taps - 1) + long(j);
                if (src >= 0) acc += double(cw.at(c, j)) * u[size_t(src)][c];
            }
            return acc * kiln_test::sigmoid64(acc);
        };
        for (size_t t = 0; t < T; ++t) {
            Vec xt = kiln_test::to64(x.row(t), d.hidden);
            uq.push_back(kiln_test::matvec64(w.q_proj, xt));
            uk.push_back(kiln_test::matvec64(w.k_proj, xt));
            uv.push_back(kiln_test::matvec64(w.v_proj, xt));
            Vec beta = kiln_test::matvec64(w.b_proj, xt);
            Vec z = kiln_test::matvec64(w.f_b, kiln_test::matvec64(w.f_a, xt));
            Vec gate = d.full_rank_gate ? kiln_test::matvec64(w.g_proj, xt)
                                        : kiln_test::matvec64(w.g_b, kiln_test::matvec64(w.g_a, xt));
            Vec o_all(W);
            for (size_t h = 0; h < H; ++h) {
                Vec q(K), k(K), v(K), g(K);
                for (size_t c = 0; c < K; ++c) {
                    q[c] = conv(uq, w.q_conv, t, h * K + c);
                    k[c] = conv(uk, w.k_conv, t, h * K + c);
                    v[c] = conv(uv, w.v_conv, t, h * K + c);
                }
                double qn = 0, kn = 0;
                for (size_t c = 0; c < K; ++c) qn += q[c] * q[c], kn += k[c] * k[c];
                for (size_t c = 0; c < K; ++c) {
                    q[c] = q[c] / std::sqrt(qn + 1e-6) / std::sqrt(double(K));
                    k[c] = k[c] / std::sqrt(kn + 1e-6);
                }
                double b = kiln_test::sigmoid64(beta[h]);
                for (size_t c = 0; c < K; ++c) {
                    double zc = z[h * K + c] + w.dt_bias[h * K + c];
                    double a = std::exp(double(w.A_log[per_channel_alog ? c : h]));
                    double sp = std::log1p(std::exp(zc));
                    switch (form) {
                        case GateForm::safe: g[c] = *d.gate_lower_bound * kiln_test::sigmoid64(a * zc); break;
                        case GateForm::softplus: g[c] = -a * sp; break;
                        case GateForm::clamp_wrong: g[c] = std::max(-a * sp, double(*d.gate_lower_bound)); break;
                    }
                }
                Vec& s = S[h];
                for (size_t c = 0; c < K; ++c)
                    for (size_t j = 0; j < K; ++j) s[c * K + j] *= std::exp(g[c]);
                for (size_t j = 0; j < K; ++j) {
                    double sk = 0;
                    for (size_t c = 0; c < K; ++c) sk += s[c * K + j] * k[c];
                    double delta = b * (v[j] - sk);
                    for (size_t c = 0; c < K; ++c) s[c * K + j] += k[c] * delta;
                }
                Vec o(K, 0.0);
                for (size_t j = 0; j < K; ++j)
                    for (size_t c = 0; c < K; ++c) o[j] += s[c * K + j] * q[c];
                Vec on = kiln_test::rmsnorm64(o, w.o_norm, d.norm_eps);
                for (size_t c = 0; c < K; ++c) o_all[h * K + c] = on[c] * kiln_test::sigmoid64(gate[h * K + c]);
            }
            Vec yt = kiln_test::matvec64(w.o_proj, o_all);
            for (size_t i = 0; i < d.hidden; ++i) y.at(t, i) = float(yt[i]);
        }
        return y;
    }
};

KdaWeights random_kda(Rng& rng, const KdaDims& d, size_t alog_len, float dt_bias_center = 0.0f) {
    const size_t W = d.width(), K = d.head_dim;
    KdaWeights w;
    w.q_proj = rng.weight(W, d.hidden);
    w.k_proj = rng.weight(W, d.hidden);
    w.v_proj = rng.weight(W, d.hidden);
    w.q_conv = rng.mat(W, d.conv_kernel, 0.8f);
    w.k_conv = rng.mat(W, d.conv_kernel, 0.8f);
    w.v_conv = rng.mat(W, d.conv_kernel, 0.8f);
    w.f_a = rng.weight(K, d.hidden);
    w.f_b = rng.weight(W, K);
    w.dt_bias = rng.vec(W, dt_bias_center - 1.0f, dt_bias_center + 1.0f);
    // Distinct per-entry values so per-head and per-channel readings differ.
    w.A_log.resize(alog_len);
    for (size_t i = 0; i < alog_len; ++i) w.A_log[i] = -1.0f + 0.45f * float(i);
    w.b_proj = rng.weight(d.heads, d.hidden);
    if (d.full_rank_gate) {
        w.g_proj = rng.weight(W, d.hidden);
    } else {
        w.g_a = rng.weight(K, d.hidden);
        w.g_b = rng.weight(W, K);
    }
    w.o_norm = rng.vec(K, 0.5f, 1.5f);
    w.o_proj = rng.weight(d.hidden, W);
    w.validate(d);
    return w;
}

KdaDims small_dims(bool safe_gate) {
    KdaDims d;
    d.hidden = 6;
    d.heads = 2;
    d.head_dim = 4;
    d.gate_lower_bound = safe_gate ? std::optional<float>(-5.0f) : std::nullopt;
    d.full_rank_gate = safe_gate;
    return d;
}

}  // namespace

TEST_CASE("kda gate: K3 safe gate is lb*sigmoid(exp(A)*z), not a clamp") {
    // a = A_log[h] = 0 → exp(a) = 1; z = 0: safe gate -5 * sigmoid(0) = -2.5.
    CHECK(kda_gate(0.0f, 0.0f, -5.0f) == Approx(-2.5));
    // The clamp form exp(max(-softplus(0), -5)) would give log-decay -log 2 = -0.693 here.
    CHECK(kda_gate(0.0f, 0.0f, -5.0f) != Approx(-std::log(2.0)));
    CHECK(kda_gate(1.2f, std::log(2.0f), -5.0f) == Approx(-5.0 / (1 + std::exp(-2.4))));
    // Large z saturates at the bound, large negative z goes to 0 (no decay).
    CHECK(kda_gate(50.0f, 0.0f, -5.0f) == Approx(-5.0));
    CHECK(kda_gate(-50.0f, 0.0f, -5.0f) == Approx(0.0).epsilon(1e-12));
}

TEST_CASE("kda gate: softplus form without a lower bound") {
    CHECK(kda_gate(0.0f, 0.0f, std::nullopt) == Approx(-std::log(2.0)));
    CHECK(kda_gate(1.5f, 0.5f, std::nullopt) == Approx(-std::exp(0.5) * std::log1p(std::exp(1.5))));
    // No lower bound: decays below -5 are possible.
    CHECK(kda_gate(10.0f, 0.0f, std::nullopt) < -9.9f);
}

TEST_CASE("delta rule: hand-computed two-token case") {
    // K = V = 2. t=1: S = 0.5 [1,0]ᵀ[2,3];  t=2: decay [0.5, 0.25], k = [0.6, 0.8], v = [1,-1], β = 1.
    DeltaRuleInputs in{Matrix(2, 2, {1, 1, 1, 2}), Matrix(2, 2, {1, 0, 0.6f, 0.8f}), Matrix(2, 2, {2, 3, 1, -1}),
                       Matrix(2, 2, {0, 0, std::log(0.5f), std::log(0.25f)}), {0.5f, 1.0f}};
    for (int chunked = 0; chunked < 2; ++chunked) {
        CAPTURE(chunked);
        std::vector<float> S(4, 0.0f);
        Matrix o = chunked ? delta_rule_chunked(in, S.data(), 64) : delta_rule_recurrent(in, S.data());
        CHECK(o.at(0, 0) == Approx(1.0));
        CHECK(o.at(0, 1) == Approx(1.5));
        CHECK(o.at(1, 0) == Approx(2.04));
        CHECK(o.at(1, 1) == Approx(-2.44));
        // Final state [[0.92, -0.12], [0.56, -1.16]] (K-first).
        CHECK(S[0] == Approx(0.92));
        CHECK(S[1] == Approx(-0.12));
        CHECK(S[2] == Approx(0.56));
        CHECK(S[3] == Approx(-1.16));
    }
}

namespace {

DeltaRuleInputs random_core_inputs(Rng& rng, size_t T, size_t K, size_t V, float g_lo, float g_hi,
                                   float slow_fraction) {
    DeltaRuleInputs in{rng.mat(T, K, 1.0f), rng.mat(T, K, 1.0f), rng.mat(T, V, 1.0f), Matrix(T, K),
                       rng.vec(T, 0.05f, 0.95f)};
    for (size_t t = 0; t < T; ++t) {
        l2norm_inplace(in.q.row(t), K, 1e-6f);
        l2norm_inplace(in.k.row(t), K, 1e-6f);
        for (size_t c = 0; c < K; ++c) in.q.at(t, c) /= std::sqrt(float(K));
        for (size_t c = 0; c < K; ++c)
            // Most channels decay almost at the -5 bound; a few keep memory so the state matters.
            in.g.at(t, c) = (float(c) < slow_fraction * float(K)) ? rng.uniform(-0.05f, -1e-4f) : rng.uniform(g_lo, g_hi);
    }
    return in;
}

}  // namespace

TEST_CASE("delta rule: chunked equals recurrent with gates near the -5 bound") {
    Rng rng(7);
    const size_t T = 203, K = 16, V = 12;  // several 64-chunks and a partial one
    DeltaRuleInputs in = random_core_inputs(rng, T, K, V, -5.0f, -4.9f, 0.25f);
    std::vector<float> S0 = rng.vec(K * V, -0.5f, 0.5f);
    std::vector<float> Sr = S0, Sc = S0;
    Matrix o_r = delta_rule_recurrent(in, Sr.data());
    for (size_t chunk : {size_t(64), size_t(16), size_t(1), size_t(203)}) {
        CAPTURE(chunk);
        Sc = S0;
        Matrix o_c = delta_rule_chunked(in, Sc.data(), chunk);
        CHECK(kiln_test::rel_err(o_c, o_r) < 2e-5);
        CHECK(kiln_test::rel_err(Sc, Sr) < 2e-5);
    }
    // Within a 64-chunk Γ spans ~-320: factoring exp(Γr)·exp(-Γi) would overflow fp32.
    double span = 0;
    for (size_t t = 0; t < 64; ++t) span += in.g.at(t, K - 1);
    CHECK(span < -300.0);
}

TEST_CASE("delta rule: chunked equals recurrent at K3's head dim (K = V = 128) with gates near -5") {
    Rng rng(19);
    const size_t T = 130, K = 128, V = 128;
    DeltaRuleInputs in = random_core_inputs(rng, T, K, V, -5.0f, -4.95f, 0.1f);
    std::vector<float> Sr = rng.vec(K * V, -0.2f, 0.2f), Sc = Sr;
    Matrix o_r = delta_rule_recurrent(in, Sr.data());
    Matrix o_c = delta_rule_chunked(in, Sc.data(), 64);
    CHECK(kiln_test::rel_err(o_c, o_r) < 2e-5);
    CHECK(kiln_test::rel_err(Sc, Sr) < 2e-5);
}

TEST_CASE("delta rule: chunked equals recurrent with mild gates and split calls") {
    Rng rng(11);
    const size_t T = 150, K = 8, V = 8;
    DeltaRuleInputs in = random_core_inputs(rng, T, K, V, -0.3f, -0.001f, 0.0f);
    std::vector<float> Sr(K * V, 0.0f), Sc(K * V, 0.0f);
    Matrix o_r = delta_rule_recurrent(in, Sr.data());
    // Chunked over two calls (split at 70, not a chunk multiple): the state carries across.
    auto part = [&](size_t b, size_t e) {
        return DeltaRuleInputs{kiln_test::rows(in.q, b, e), kiln_test::rows(in.k, b, e), kiln_test::rows(in.v, b, e),
                               kiln_test::rows(in.g, b, e),
                               std::vector<float>(in.beta.begin() + long(b), in.beta.begin() + long(e))};
    };
    Matrix a = delta_rule_chunked(part(0, 70), Sc.data(), 64);
    Matrix b = delta_rule_chunked(part(70, T), Sc.data(), 64);
    CHECK(kiln_test::rel_err(kiln_test::rows(o_r, 0, 70), a) < 1e-5);
    CHECK(kiln_test::rel_err(kiln_test::rows(o_r, 70, T), b) < 1e-5);
    CHECK(kiln_test::rel_err(Sc, Sr) < 1e-5);
}

TEST_CASE("kda layer matches an fp64 per-head reference; per-channel A_log does not") {
    Rng rng(3);
    KdaDims d = small_dims(true);
    // A_log stored with head_dim entries (as K3: [128] for 96 heads); only the first H are used.
    KdaWeights w = random_kda(rng, d, d.head_dim);
    Matrix x = rng.mat(9, d.hidden, 1.5f);
    Matrix expect = NaiveKda{}.run(w, d, x);
    Matrix wrong = NaiveKda{true, GateForm::safe}.run(w, d, x);
    for (KdaMode mode : {KdaMode::recurrent, KdaMode::chunked}) {
        KdaState st = KdaState::zeros(d);
        Matrix y = kda_forward(w, d, st, x, mode);
        CHECK(kiln_test::rel_err(y, expect) < 1e-5);
        CHECK(kiln_test::rel_err(y, wrong) > 1e-2);  // the per-channel reading is distinguishable
    }
}

TEST_CASE("kda layer: safe gate is not the clamped softplus gate") {
    Rng rng(5);
    KdaDims d = small_dims(true);
    KdaWeights w = random_kda(rng, d, d.heads);
    Matrix x = rng.mat(8, d.hidden, 1.5f);
    Matrix expect = NaiveKda{false, GateForm::safe}.run(w, d, x);
    Matrix clamp = NaiveKda{false, GateForm::clamp_wrong}.run(w, d, x);
    KdaState st = KdaState::zeros(d);
    Matrix y = kda_forward(w, d, st, x, KdaMode::recurrent);
    CHECK(kiln_test::rel_err(y, expect) < 1e-5);
    CHECK(kiln_test::rel_err(y, clamp) > 1e-2);
}

TEST_CASE("kda layer: softplus gate and low-rank output gate (Kimi-Linear-48B form)") {
    Rng rng(9);
    KdaDims d = small_dims(false);
    KdaWeights w = random_kda(rng, d, d.heads);
    Matrix x = rng.mat(7, d.hidden, 1.5f);
    Matrix expect = NaiveKda{false, GateForm::softplus}.run(w, d, x);
    for (KdaMode mode : {KdaMode::recurrent, KdaMode::chunked}) {
        KdaState st = KdaState::zeros(d);
        CHECK(kiln_test::rel_err(kda_forward(w, d, st, x, mode), expect) < 1e-5);
    }
}

TEST_CASE("kda layer: conv and recurrent state carry across calls of any size") {
    Rng rng(13);
    KdaDims d = small_dims(true);
    d.chunk_size = 4;  // several chunks per call
    KdaWeights w = random_kda(rng, d, d.head_dim, -2.0f);
    const size_t T = 23;
    Matrix x = rng.mat(T, d.hidden, 1.5f);
    Matrix expect = NaiveKda{}.run(w, d, x);
    for (size_t step : {size_t(1), size_t(2), size_t(5), size_t(23)}) {
        for (KdaMode mode : {KdaMode::recurrent, KdaMode::chunked}) {
            CAPTURE(step);
            KdaState st = KdaState::zeros(d);
            Matrix y = kiln_test::poisoned(T, d.hidden);
            for (size_t b = 0; b < T; b += step) {
                size_t e = std::min(T, b + step);
                Matrix part = kda_forward(w, d, st, kiln_test::rows(x, b, e), mode);
                std::copy(part.data.begin(), part.data.end(), y.row(b));
            }
            CHECK(kiln_test::rel_err(y, expect) < 1e-5);
            // The conv state holds the last 3 projected (pre-activation) inputs.
            auto u_last = matvec(w.k_proj, x.row_span(T - 1));
            for (size_t c = 0; c < d.width(); ++c) CHECK(st.conv[1].at(2, c) == Approx(u_last[c]).epsilon(1e-5));
        }
    }
}

TEST_CASE("kda layer: chunked equals recurrent with gates pushed to the -5 bound") {
    Rng rng(17);
    KdaDims d = small_dims(true);
    d.head_dim = 8;
    d.heads = 2;
    KdaWeights w = random_kda(rng, d, d.head_dim, 8.0f);  // large dt_bias: sigmoid(exp(A) z) → 1, g → -5
    const size_t T = 150;
    Matrix x = rng.mat(T, d.hidden, 1.0f);
    KdaState a = KdaState::zeros(d), b = KdaState::zeros(d);
    Matrix yr = kda_forward(w, d, a, x, KdaMode::recurrent);
    Matrix yc = kda_forward(w, d, b, x, KdaMode::chunked);
    CHECK(kiln_test::rel_err(yc, yr) < 1e-5);
    CHECK(kiln_test::rel_err(b.S, a.S) < 1e-5);
}

TEST_CASE("kda weights are validated") {
    Rng rng(1);
    KdaDims d = small_dims(true);
    KdaWeights w = random_kda(rng, d, d.heads);
    w.A_log.resize(1);
    CHECK_THROWS_AS(w.validate(d), kiln::InvalidArgument);
    w = random_kda(rng, d, d.heads);
    w.o_proj = Matrix(d.hidden, d.width() + 1);
    CHECK_THROWS_AS(w.validate(d), kiln::InvalidArgument);
}
