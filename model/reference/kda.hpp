// Kimi Delta Attention (k3-model.md §1), the reference form. Per token, from the normed input x:
//   q,k,v = SiLU(CausalConv4(W x))            depthwise, kernel 4, conv state = last 3 projected inputs
//   q,k  ← per-head L2 norm (eps 1e-6 inside the sqrt);  q ← q / sqrt(K)
//   β_h   = sigmoid(b_proj x)_h
//   z     = f_b(f_a x) + dt_bias                             [H, K]
//   g_h   = lb · sigmoid(exp(A_log[h]) · z_h)   with gate_lower_bound lb (K3 "safe gate", not a clamp)
//   g_h   = −exp(A_log[h]) · softplus(z_h)      without it (Kimi-Linear-48B)
//   A_log is read PER HEAD from its first H entries (the K3 checkpoint stores [head_dim]).
//   S' = Diag(exp g) S;  S = S' + β k (v − S'ᵀk)ᵀ;  o = Sᵀq           fp32 K×V state per head
//   o_h ← RMSNorm(o_h) ⊙ o_norm ⊙ sigmoid(gate_h),  gate = g_proj x (full rank) or g_b(g_a x); no bias
//   y = o_proj concat_h(o_h)
// The recurrence has two interchangeable evaluations: token by token, and the chunkwise-parallel
// (WY / UT transform) form of §1.3 with chunk 64. Both carry the same state across calls.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "model/reference/tensor_ops.hpp"

namespace kiln::model::reference {

struct KdaDims {
    size_t hidden = 0;     // d
    size_t heads = 0;      // H
    size_t head_dim = 0;   // K = V
    size_t conv_kernel = 4;
    std::optional<float> gate_lower_bound;  // K3: -5 (safe gate); unset: softplus gate
    bool full_rank_gate = true;             // g_proj [H·K, d]; else g_a [r, d] + g_b [H·K, r]
    float norm_eps = 1e-5f;                 // o_norm (rms_norm_eps)
    size_t chunk_size = 64;                 // chunked evaluation

    size_t width() const { return heads * head_dim; }
};

inline constexpr float kKdaL2NormEps = 1e-6f;

struct KdaWeights {
    Matrix q_proj, k_proj, v_proj;   // [H·K, d]
    Matrix q_conv, k_conv, v_conv;   // [H·K, kernel]; tap kernel-1 multiplies the current token
    Matrix f_a, f_b;                 // [r, d], [H·K, r]
    std::vector<float> dt_bias;      // [H·K]
    std::vector<float> A_log;        // as stored (>= H entries); entry h is head h's value
    Matrix b_proj;                   // [H, d]
    Matrix g_proj;                   // [H·K, d] when full_rank_gate
    Matrix g_a, g_b;                 // [r, d], [H·K, r] otherwise
    std::vector<float> o_norm;       // [K], shared by all heads
    Matrix o_proj;                   // [d, H·K]

    // Throws InvalidArgument naming the first tensor whose shape does not match dims.
    void validate(const KdaDims& dims) const;
};

// Per-request state of one KDA layer.
struct KdaState {
    Matrix conv[3];            // q, k, v: [kernel-1, H·K] projected (pre-conv) inputs, oldest first
    std::vector<float> S;      // [H, K, V] fp32 recurrent state

    static KdaState zeros(const KdaDims& dims);
};

enum class KdaMode { recurrent, chunked };

// The per-channel log-decay g for one channel of head h. a_log_h = A_log[h].
float kda_gate(float z, float a_log_h, std::optional<float> lower_bound);

// Inputs of the delta-rule core for one head, already activated: q (normalised and scaled), k
// (normalised), v, g (log decay, ≤ 0) as [T, K] / [T, V] matrices and β [T].
struct DeltaRuleInputs {
    Matrix q, k, v, g;
    std::vector<float> beta;
};

// Runs the recurrence token by token; S is the head's [K, V] state, updated in place. Returns o [T, V].
Matrix delta_rule_recurrent(const DeltaRuleInputs& in, float* S);

// The same, evaluated chunkwise (§1.3): per chunk the cumulative log-decay Γ, the strictly lower
// A = β_r Σ_c k_r k_i exp(Γ_r−Γ_i), T = (I + A)⁻¹ Diag(β) by forward substitution, W = T(exp(Γ)⊙K),
// U = T V, pseudo-values U − W S, the output (Q⊙exp(Γ))S + Aqk·(U − W S) and the state pass.
// exp(Γ_r − Γ_i) is always evaluated on the difference, never factored.
Matrix delta_rule_chunked(const DeltaRuleInputs& in, float* S, size_t chunk_size);

// The whole layer on a sequence x [T, d] continuing from `state`; returns y [T, d].
Matrix kda_forward(const KdaWeights& w, const KdaDims& dims, KdaState& state, const Matrix& x, KdaMode mode);

}  // namespace kiln::model::reference
