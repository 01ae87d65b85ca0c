#include "model/reference/mla.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::reference {

void MlaWeights::validate(const MlaDims& d) const {
    const size_t qo = d.heads * d.qk_head();
    if (d.q_lora_rank) {
        require_shape(q_a, d.q_lora_rank, d.hidden, "mla q_a_proj");
        if (q_a_norm.size() != d.q_lora_rank) throw InvalidArgument("mla q_a_layernorm: wrong length");
        require_shape(q_b, qo, d.q_lora_rank, "mla q_b_proj");
    } else {
        require_shape(q_proj, qo, d.hidden, "mla q_proj");
    }
    require_shape(kv_a, d.cache_width(), d.hidden, "mla kv_a_proj_with_mqa");
    if (kv_a_norm.size() != d.kv_lora_rank) throw InvalidArgument("mla kv_a_layernorm: wrong length");
    require_shape(kv_b, d.heads * (d.qk_nope + d.v_head), d.kv_lora_rank, "mla kv_b_proj");
    if (d.output_gate) require_shape(g_proj, d.heads * d.v_head, d.hidden, "mla g_proj");
    require_shape(o_proj, d.hidden, d.heads * d.v_head, "mla o_proj");
}

Matrix mla_forward(const MlaWeights& w, const MlaDims& d, MlaCache& cache, const Matrix& x, MlaMode mode) {
    const size_t T = x.rows, H = d.heads, dn = d.qk_nope, dr = d.qk_rope, dv = d.v_head, dc = d.kv_lora_rank;
    const size_t dqk = d.qk_head(), cw = d.cache_width();
    if (x.cols != d.hidden) throw InvalidArgument(fmt::format("mla: input width {} != hidden {}", x.cols, d.hidden));
    if (cache.width != cw) throw InvalidArgument("mla: cache width does not match the layer");

    // Queries for the new tokens.
    Matrix q;
    if (d.q_lora_rank) {
        Matrix cq = linear(w.q_a, x);
        for (size_t t = 0; t < T; ++t) rmsnorm(cq.row(t), w.q_a_norm.data(), cq.cols, d.norm_eps, cq.row(t));
        q = linear(w.q_b, cq);
    } else {
        q = linear(w.q_proj, x);
    }

    // Append (ĉ ; k_rope) for the new tokens: the latent is normed, the rope tail is raw.
    const size_t past = cache.tokens();
    Matrix kv = linear(w.kv_a, x);
    for (size_t t = 0; t < T; ++t) {
        rmsnorm(kv.row(t), w.kv_a_norm.data(), dc, d.norm_eps, kv.row(t));
        cache.rows.insert(cache.rows.end(), kv.row(t), kv.row(t) + cw);
    }
    const size_t N = past + T;
    const double scale = 1.0 / std::sqrt(double(dqk));

    // W_UK^h is rows [h·(dn+dv), h·(dn+dv)+dn) of kv_b; W_UV^h the next dv rows.
    auto uk = [&](size_t h, size_t n) { return w.kv_b.row(h * (dn + dv) + n); };
    auto uv = [&](size_t h, size_t j) { return w.kv_b.row(h * (dn + dv) + dn + j); };

    Matrix attn(T, H * dv);
    if (mode == MlaMode::plain) {
        // Expand keys and values of every cached token once: kv_full [N, H·(dn+dv)].
        Matrix latent(N, dc);
        for (size_t j = 0; j < N; ++j) std::copy_n(cache.row(j), dc, latent.row(j));
        Matrix kvf = linear(w.kv_b, latent);
        std::vector<float> p(N), key(dqk);
        for (size_t t = 0; t < T; ++t) {
            const size_t visible = past + t + 1;
            for (size_t h = 0; h < H; ++h) {
                const float* qh = q.row(t) + h * dqk;
                for (size_t j = 0; j < visible; ++j) {
                    std::copy_n(kvf.row(j) + h * (dn + dv), dn, key.data());
                    std::copy_n(cache.row(j) + dc, dr, key.data() + dn);
                    p[j] = static_cast<float>(dot(qh, key.data(), dqk) * scale);
                }
                softmax_inplace(p.data(), visible);
                for (size_t c = 0; c < dv; ++c) {
                    double s = 0;
                    for (size_t j = 0; j < visible; ++j) s += double(p[j]) * kvf.row(j)[h * (dn + dv) + dn + c];
                    attn.at(t, h * dv + c) = static_cast<float>(s);
                }
            }
        }
    } else {
        std::vector<float> qt(dc + dr), p(N), ob(dc);
        for (size_t t = 0; t < T; ++t) {
            const size_t visible = past + t + 1;
            for (size_t h = 0; h < H; ++h) {
                const float* qh = q.row(t) + h * dqk;
                // q̃ = W_UKᵀ q_nope, then the rope part of the query unchanged: a (dc + dr)-dim MQA query.
                for (size_t c = 0; c < dc; ++c) {
                    double s = 0;
                    for (size_t n = 0; n < dn; ++n) s += double(uk(h, n)[c]) * qh[n];
                    qt[c] = static_cast<float>(s);
                }
                std::copy_n(qh + dn, dr, qt.data() + dc);
                for (size_t j = 0; j < visible; ++j) p[j] = static_cast<float>(dot(qt.data(), cache.row(j), cw) * scale);
                softmax_inplace(p.data(), visible);
                // Latent output ō = Σ p ĉ, expanded by W_UV.
                for (size_t c = 0; c < dc; ++c) {
                    double s = 0;
                    for (size_t j = 0; j < visible; ++j) s += double(p[j]) * cache.row(j)[c];
                    ob[c] = static_cast<float>(s);
                }
                for (size_t c = 0; c < dv; ++c) attn.at(t, h * dv + c) = static_cast<float>(dot(uv(h, c), ob.data(), dc));
            }
        }
    }

    if (d.output_gate) {
        Matrix g = linear(w.g_proj, x);
        for (size_t i = 0; i < attn.data.size(); ++i)
            attn.data[i] = static_cast<float>(double(attn.data[i]) * sigmoid(g.data[i]));
    }
    return linear(w.o_proj, attn);
}

}  // namespace kiln::model::reference
