#include <doctest/doctest.h>

#include <cmath>

#include "model/reference/mla.hpp"
#include "reference_test_util.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::reference;
using kiln_test::Matrix;
using kiln_test::Rng;
using kiln_test::Vec;
using doctest::Approx;

namespace {

MlaWeights random_mla(Rng& rng, const MlaDims& d) {
    MlaWeights w;
    const size_t qo = d.heads * d.qk_head();
    if (d.q_lora_rank) {
        w.q_a = rng.weight(d.q_lora_rank, d.hidden);
        w.q_a_norm = rng.vec(d.q_lora_rank, 0.5f, 1.5f);
        w.q_b = rng.weight(qo, d.q_lora_rank);
    } else {
        w.q_proj = rng.weight(qo, d.hidden);
    }
    w.kv_a = rng.weight(d.cache_width(), d.hidden);
    w.kv_a_norm = rng.vec(d.kv_lora_rank, 0.5f, 1.5f);
    w.kv_b = rng.weight(d.heads * (d.qk_nope + d.v_head), d.kv_lora_rank);
    if (d.output_gate) w.g_proj = rng.weight(d.heads * d.v_head, d.hidden);
    w.o_proj = rng.weight(d.hidden, d.heads * d.v_head);
    w.validate(d);
    return w;
}

MlaDims small_dims(bool q_lora, bool gate) {
    MlaDims d;
    d.hidden = 8;
    d.heads = 3;
    d.q_lora_rank = q_lora ? 5 : 0;
    d.kv_lora_rank = 6;
    d.qk_nope = 4;
    d.qk_rope = 2;
    d.v_head = 3;
    d.output_gate = gate;
    return d;
}

// Independent fp64 MLA from k3-model.md §3 (NoPE): full keys and values per head, causal softmax.
Matrix naive_mla(const MlaWeights& w, const MlaDims& d, const Matrix& x) {
    const size_t T = x.rows, H = d.heads, dn = d.qk_nope, dr = d.qk_rope, dv = d.v_head, dc = d.kv_lora_rank;
    std::vector<Vec> q(T), kn(T), kr(T), v(T);
    for (size_t t = 0; t < T; ++t) {
        Vec xt = kiln_test::to64(x.row(t), d.hidden);
        q[t] = d.q_lora_rank ? kiln_test::matvec64(w.q_b, kiln_test::rmsnorm64(kiln_test::matvec64(w.q_a, xt), w.q_a_norm, d.norm_eps))
                             : kiln_test::matvec64(w.q_proj, xt);
        Vec kv = kiln_test::matvec64(w.kv_a, xt);
        Vec c(kv.begin(), kv.begin() + long(dc));
        kr[t] = Vec(kv.begin() + long(dc), kv.end());  // raw, un-rotated
        Vec full = kiln_test::matvec64(w.kv_b, kiln_test::rmsnorm64(c, w.kv_a_norm, d.norm_eps));
        kn[t] = Vec(H * dn), v[t] = Vec(H * dv);
        for (size_t h = 0; h < H; ++h) {
            for (size_t i = 0; i < dn; ++i) kn[t][h * dn + i] = full[h * (dn + dv) + i];
            for (size_t i = 0; i < dv; ++i) v[t][h * dv + i] = full[h * (dn + dv) + dn + i];
        }
    }
    Matrix y(T, d.hidden);
    for (size_t t = 0; t < T; ++t) {
        Vec xt = kiln_test::to64(x.row(t), d.hidden);
        Vec o(H * dv, 0.0);
        for (size_t h = 0; h < H; ++h) {
            Vec s(t + 1);
            double mx = -1e300;
            for (size_t j = 0; j <= t; ++j) {
                double acc = 0;
                for (size_t i = 0; i < dn; ++i) acc += q[t][h * (dn + dr) + i] * kn[j][h * dn + i];
                for (size_t i = 0; i < dr; ++i) acc += q[t][h * (dn + dr) + dn + i] * kr[j][i];
                s[j] = acc / std::sqrt(double(dn + dr));
                mx = std::max(mx, s[j]);
            }
            double sum = 0;
            for (auto& e : s) sum += (e = std::exp(e - mx));
            for (size_t j = 0; j <= t; ++j)
                for (size_t i = 0; i < dv; ++i) o[h * dv + i] += s[j] / sum * v[j][h * dv + i];
        }
        if (d.output_gate) {
            Vec g = kiln_test::matvec64(w.g_proj, xt);
            for (size_t i = 0; i < o.size(); ++i) o[i] *= kiln_test::sigmoid64(g[i]);
        }
        Vec yt = kiln_test::matvec64(w.o_proj, o);
        for (size_t i = 0; i < d.hidden; ++i) y.at(t, i) = float(yt[i]);
    }
    return y;
}

}  // namespace

TEST_CASE("mla: one token attends only to itself (hand check)") {
    // d = 2, one head, d_c = 2, d_n = 1, d_r = 1, d_v = 2. With one token the softmax is 1, so
    // y = W_o (W_UV ĉ ⊙ sigmoid(g_proj x)) with ĉ = RMSNorm(c_kv) ⊙ γ.
    MlaDims d{2, 1, 0, 2, 1, 1, 2, true, 0.0f};
    MlaWeights w;
    w.q_proj = Matrix(2, 2, {1, 0, 0, 1});
    w.kv_a = Matrix(3, 2, {1, 0, 0, 2, 1, 1});   // c_kv = [x0, 2 x1], k_rope = x0 + x1
    w.kv_a_norm = {1.0f, 0.5f};
    w.kv_b = Matrix(3, 2, {1, 1, 2, 0, 0, -1});  // row 0: W_UK; rows 1-2: W_UV
    w.g_proj = Matrix(2, 2, {0, 0, 1, 0});
    w.o_proj = Matrix(2, 2, {1, 0, 1, 1});
    w.validate(d);
    Matrix x(1, 2, {3, 2});
    // c_kv = [3, 4], rms = sqrt(12.5): ĉ = [3/r, 0.5·4/r]; v = [2·3/r, −2/r]; gate = sigmoid([0, 3]).
    double r = std::sqrt(12.5);
    double v0 = 6 / r * 0.5, v1 = -2 / r / (1 + std::exp(-3.0));
    for (MlaMode mode : {MlaMode::plain, MlaMode::absorbed}) {
        MlaCache cache = MlaCache::empty(d);
        Matrix y = mla_forward(w, d, cache, x, mode);
        CHECK(y.at(0, 0) == Approx(v0));
        CHECK(y.at(0, 1) == Approx(v0 + v1));
        REQUIRE(cache.tokens() == 1);
        CHECK(cache.row(0)[0] == Approx(3 / r));
        CHECK(cache.row(0)[1] == Approx(2 / r));
        CHECK(cache.row(0)[2] == Approx(5.0));  // raw k_rope tail, not normed, not rotated
    }
}

TEST_CASE("mla: two tokens, scores scaled by 1/sqrt(d_n + d_r) with the un-rotated rope tail (hand check)") {
    // One head, d_c = 1, d_n = 1, d_r = 1, d_v = 1, no gate; kv_a_norm makes ĉ = ±1 · γ.
    MlaDims d{2, 1, 0, 1, 1, 1, 1, false, 0.0f};
    MlaWeights w;
    w.q_proj = Matrix(2, 2, {1, 0, 0, 1});       // q = [q_nope, q_rope] = x
    w.kv_a = Matrix(2, 2, {1, 0, 0, 1});         // c_kv = x0, k_rope = x1
    w.kv_a_norm = {2.0f};                        // ĉ = sign(x0) · 2
    w.kv_b = Matrix(2, 1, {1.5f, 3.0f});         // k_nope = 1.5 ĉ, v = 3 ĉ
    w.o_proj = Matrix(2, 1, {1, -1});
    w.validate(d);
    Matrix x(2, 2, {1, 0.5f, -2, 1});
    // Token 1 keys: ĉ0 = 2 → k0 = [3, 0.5], v0 = 6;  ĉ1 = -2 → k1 = [-3, 1], v1 = -6.
    // Token 1 query [-2, 1]: s0 = (-6 + 0.5)/√2, s1 = (6 + 1)/√2.
    double s0 = -5.5 / std::sqrt(2.0), s1 = 7.0 / std::sqrt(2.0);
    double p0 = 1 / (1 + std::exp(s1 - s0));
    double o1 = p0 * 6 + (1 - p0) * -6;
    for (MlaMode mode : {MlaMode::plain, MlaMode::absorbed}) {
        MlaCache cache = MlaCache::empty(d);
        Matrix y = mla_forward(w, d, cache, x, mode);
        CHECK(y.at(0, 0) == Approx(6.0));
        CHECK(y.at(1, 0) == Approx(o1));
        CHECK(y.at(1, 1) == Approx(-o1));
    }
}

TEST_CASE("mla: plain and absorbed forms agree and match an fp64 reference") {
    for (bool q_lora : {true, false}) {
        for (bool gate : {true, false}) {
            CAPTURE(q_lora);
            CAPTURE(gate);
            Rng rng(21 + q_lora * 2 + gate);
            MlaDims d = small_dims(q_lora, gate);
            MlaWeights w = random_mla(rng, d);
            const size_t T = 11;
            Matrix x = rng.mat(T, d.hidden, 2.0f);
            Matrix expect = naive_mla(w, d, x);
            // Prefill in one call, in uneven chunks, and token by token, in both forms.
            for (size_t step : {size_t(11), size_t(4), size_t(1)}) {
                for (MlaMode mode : {MlaMode::plain, MlaMode::absorbed}) {
                    CAPTURE(step);
                    MlaCache cache = MlaCache::empty(d);
                    Matrix y = kiln_test::poisoned(T, d.hidden);
                    for (size_t b = 0; b < T; b += step) {
                        size_t e = std::min(T, b + step);
                        Matrix part = mla_forward(w, d, cache, kiln_test::rows(x, b, e), mode);
                        std::copy(part.data.begin(), part.data.end(), y.row(b));
                    }
                    CHECK(kiln_test::rel_err(y, expect) < 1e-5);
                    CHECK(cache.tokens() == T);
                    CHECK(cache.width == d.kv_lora_rank + d.qk_rope);
                }
            }
            // Mixed: prefill plain, then decode absorbed on the same cache.
            MlaCache cache = MlaCache::empty(d);
            Matrix a = mla_forward(w, d, cache, kiln_test::rows(x, 0, 7), MlaMode::plain);
            Matrix b = mla_forward(w, d, cache, kiln_test::rows(x, 7, T), MlaMode::absorbed);
            CHECK(kiln_test::rel_err(a, kiln_test::rows(expect, 0, 7)) < 1e-5);
            CHECK(kiln_test::rel_err(b, kiln_test::rows(expect, 7, T)) < 1e-5);
        }
    }
}

TEST_CASE("mla at K3's head dims: 576-value cache, scale 1/sqrt(192), plain == absorbed == fp64") {
    Rng rng(29);
    MlaDims d{64, 2, 48, 512, 128, 64, 128, true, 1e-5f};
    CHECK(d.cache_width() == 576);
    MlaWeights w = random_mla(rng, d);
    Matrix x = rng.mat(5, d.hidden, 2.0f);
    Matrix expect = naive_mla(w, d, x);  // scores / sqrt(128 + 64)
    for (MlaMode mode : {MlaMode::plain, MlaMode::absorbed}) {
        MlaCache cache = MlaCache::empty(d);
        Matrix y = mla_forward(w, d, cache, kiln_test::rows(x, 0, 3), mode);
        Matrix z = mla_forward(w, d, cache, kiln_test::rows(x, 3, 5), mode);
        CHECK(kiln_test::rel_err(y, kiln_test::rows(expect, 0, 3)) < 1e-5);
        CHECK(kiln_test::rel_err(z, kiln_test::rows(expect, 3, 5)) < 1e-5);
        CHECK(cache.rows.size() == 5 * 576);
    }
}

TEST_CASE("mla weights are validated") {
    Rng rng(2);
    MlaDims d = small_dims(true, true);
    MlaWeights w = random_mla(rng, d);
    w.kv_b = Matrix(3, 3);
    CHECK_THROWS_AS(w.validate(d), kiln::InvalidArgument);
}
