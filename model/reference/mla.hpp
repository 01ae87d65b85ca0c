// Gated Multi-head Latent Attention with NoPE (k3-model.md §3), the reference form. Per token x:
//   q = W_qb RMSNorm(W_qa x)  (q_lora path)  or  q = W_q x;   q_h = [q_nope (d_n) ; q_rope (d_r)]
//   [c_kv ; k_rope] = W_kva x;  ĉ = RMSNorm(c_kv) ⊙ kv_a_layernorm
//   [k_nope_h ; v_h] = (W_kvb ĉ)_h;   k_h = [k_nope_h ; k_rope]   (k_rope shared, never rotated: NoPE)
//   o_h = Σ_j softmax_j(q_h·k_h,j / sqrt(d_n + d_r)) v_h,j   (causal)
//   y = W_o (concat_h o_h ⊙ sigmoid(g_proj x))   (output gate only when enabled; no bias)
// The cache holds (ĉ, k_rope) = d_c + d_r values per token. Two evaluations are provided: "plain"
// (keys and values expanded per head from the cache) and "absorbed" (q̃_h = W_UKᵀ q_nope scores the
// latent directly, the latent output is expanded once by W_UV), which must agree.
#pragma once

#include <cstddef>
#include <vector>

#include "model/reference/tensor_ops.hpp"

namespace kiln::model::reference {

struct MlaDims {
    size_t hidden = 0;        // d
    size_t heads = 0;         // n_h
    size_t q_lora_rank = 0;   // 0: plain q_proj
    size_t kv_lora_rank = 0;  // d_c
    size_t qk_nope = 0;       // d_n
    size_t qk_rope = 0;       // d_r
    size_t v_head = 0;        // d_v
    bool output_gate = true;
    float norm_eps = 1e-5f;   // q_a_layernorm and kv_a_layernorm (ModelConfig::mla_latent_norm_eps)

    size_t qk_head() const { return qk_nope + qk_rope; }
    size_t cache_width() const { return kv_lora_rank + qk_rope; }
};

struct MlaWeights {
    Matrix q_a;                    // [q_lora, d]              (q_lora path)
    std::vector<float> q_a_norm;   // [q_lora]
    Matrix q_b;                    // [n_h·(d_n+d_r), q_lora]
    Matrix q_proj;                 // [n_h·(d_n+d_r), d]       (no q_lora)
    Matrix kv_a;                   // [d_c + d_r, d]  kv_a_proj_with_mqa
    std::vector<float> kv_a_norm;  // [d_c]
    Matrix kv_b;                   // [n_h·(d_n+d_v), d_c]; per head: d_n rows W_UK then d_v rows W_UV
    Matrix g_proj;                 // [n_h·d_v, d]             (output gate)
    Matrix o_proj;                 // [d, n_h·d_v]

    void validate(const MlaDims& dims) const;
};

// Per-request latent cache of one MLA layer: one row (ĉ ; k_rope) per token seen so far.
struct MlaCache {
    size_t width = 0;
    std::vector<float> rows;   // [tokens, width]

    static MlaCache empty(const MlaDims& dims) { return {dims.cache_width(), {}}; }
    size_t tokens() const { return width ? rows.size() / width : 0; }
    const float* row(size_t t) const { return rows.data() + t * width; }
};

enum class MlaMode { plain, absorbed };

// The layer on x [T, d]: appends T rows to the cache and attends causally over everything cached.
Matrix mla_forward(const MlaWeights& w, const MlaDims& dims, MlaCache& cache, const Matrix& x, MlaMode mode);

}  // namespace kiln::model::reference
