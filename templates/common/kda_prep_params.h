// Family kda_prep: the KDA inputs of one step from the projected tokens (varlen, StepIndex order). Per
// token t and channel c = h x K + i of head h: the short causal depthwise conv (conv 4) of the q, k, v
// projections continuing from the slot's conv state, SiLU, per-head L2 norm of q and k (eps 1e-6 inside
// the sqrt), q / sqrt(K), the log decay g = lb x sigmoid(exp(A_log[h]) (z + dt_bias)) (lower_bound set) or
// -exp(A_log[h]) softplus(z + dt_bias) (softplus_gate), and beta = sigmoid(beta_raw). The slot's conv state
// advances to the step's end; each snapshot of the step gets the conv state at its position.
#pragma once

#include "common/kiln_params.h"
#include "common/step_index_params.h"

namespace kiln_params {

struct KdaPrepParams {
    StepIndex idx;
    const bf16* q_raw;      // [num_tokens, raw_stride]: columns [0, H x K) are the projection
    const bf16* k_raw;
    const bf16* v_raw;
    const bf16* z;          // f_b(f_a x), [num_tokens, z_stride]
    const bf16* beta_raw;   // b_proj x, [num_tokens, beta_stride]
    const float* q_conv;    // taps [H x K, 4] fp32; tap 3 multiplies the current token
    const float* k_conv;
    const float* v_conv;
    const float* dt_bias;   // [H x K] fp32
    const float* a_log;     // [>= H] fp32: entry h is head h's (per head, never per channel)
    float* q;               // outputs fp32 [num_tokens, H x K]
    float* k;
    float* v;
    float* g;
    float* beta;            // [num_tokens, H]
    u64 conv_offset;        // bytes from a slot's start to this layer's conv state bf16 [3][3][H x K]
    i32 raw_stride;         // elements
    i32 z_stride;
    i32 beta_stride;
    i32 heads;
    float lower_bound;      // the gate's lower bound (K3: -5) unless softplus_gate
    i32 softplus_gate;      // 1: the softplus gate (no lower bound, Kimi-Linear)
};
KILN_PARAMS_SIZE(KdaPrepParams, 280);
KILN_PARAMS_OFFSET(KdaPrepParams, q_raw, 128);
KILN_PARAMS_OFFSET(KdaPrepParams, conv_offset, 248);
KILN_PARAMS_OFFSET(KdaPrepParams, softplus_gate, 276);

}  // namespace kiln_params
