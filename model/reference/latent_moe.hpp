// Feed-forward blocks of the K3 family (k3-model.md §5, §6), the reference form.
//  - Dense GLU MLP (layer 0; also the shared experts): down(act(gate x, up x)).
//  - Router: fp32 logits = W_gate h, s = sigmoid(logits); the top-k is chosen on s + e_score_correction_bias,
//    but the gathered weights are the UNBIASED s, renormalised (Σ + 1e-20) when configured, then
//    × routed_scaling_factor (DeepSeek-V3 semantics).
//  - LatentMoE ("Stable LatentMoE"): z = W_down h; y = Σ_k g_k W2 act(W1 z, W3 z); y = RMSNorm(y) when
//    latent_moe_use_norm; out = W_up y + Shared(h). Kimi-Linear-48B has no latent (z = h, out = y + Shared(h)).
// routed_experts() runs only the expert part on given latent inputs, ids and weights: it is the reference
// the GPU W4A16 / MXFP4 MoE kernels are checked against (dequantise their weights to fp32 first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/reference/situ.hpp"
#include "model/reference/tensor_ops.hpp"

namespace kiln::model::reference {

struct MlpWeights {
    Matrix gate;   // [I, d_in]
    Matrix up;     // [I, d_in]
    Matrix down;   // [d_in, I]

    void validate(size_t d_in, size_t inter, const char* what) const;
};

// act(gate x, up x) then down, for every row of x [T, d_in].
Matrix glu_mlp(const MlpWeights& w, const GluActivation& act, const Matrix& x);

struct RouterConfig {
    size_t num_experts = 0;
    size_t top_k = 0;
    bool renormalize = true;
    float routed_scaling_factor = 1.0f;
};

struct RouterWeights {
    Matrix gate;                      // [E, d]
    std::vector<float> score_bias;    // [E] e_score_correction_bias (empty = none)
};

// top_k expert ids and weights for each token, row-major [T, top_k].
struct Routing {
    size_t top_k = 0;
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

// Routes every row of h [T, d]. Ties in the biased score go to the lower expert id.
Routing route(const RouterWeights& w, const RouterConfig& cfg, const Matrix& h);

// One routed expert in fp32 (dequantised from bf16 / INT4 / MXFP4 at load).
struct ExpertWeights {
    Matrix w1;   // gate [I, ℓ]
    Matrix w3;   // up   [I, ℓ]
    Matrix w2;   // down [ℓ, I]
};

// out[t] = Σ_k weights[t,k] · W2_e act(W1_e z_t, W3_e z_t),  e = ids[t,k]; z [T, ℓ] → [T, ℓ].
// This is the sum BEFORE the latent RMSNorm.
Matrix routed_experts(std::span<const ExpertWeights> experts, const GluActivation& act, const Matrix& z,
                      std::span<const int32_t> ids, std::span<const float> weights, size_t top_k);

struct LatentMoeDims {
    size_t hidden = 0;             // d
    size_t latent = 0;             // ℓ = routed_expert_hidden_size; 0: no latent projection (48B)
    size_t expert_inter = 0;       // moe_intermediate_size
    size_t shared_inter = 0;       // num_shared_experts · moe_intermediate_size; 0: no shared experts
    bool latent_norm = true;       // latent_moe_use_norm
    float norm_eps = 1e-5f;
    RouterConfig router;
    GluActivation act;

    size_t expert_in() const { return latent ? latent : hidden; }
};

struct LatentMoeWeights {
    RouterWeights router;
    Matrix down_proj;                  // [ℓ, d]  routed_expert_down_proj
    Matrix up_proj;                    // [d, ℓ]  routed_expert_up_proj
    std::vector<float> latent_norm;    // [ℓ]     routed_expert_norm
    std::vector<ExpertWeights> experts;
    MlpWeights shared;                 // one fused MLP of width shared_inter on the un-projected input

    void validate(const LatentMoeDims& dims) const;
};

// The block on h [T, d] (the post-attention-normed input); returns [T, d].
Matrix latent_moe_forward(const LatentMoeWeights& w, const LatentMoeDims& dims, const Matrix& h);

}  // namespace kiln::model::reference
