// Family kda_out_norm: KDA's gated output norm, per token and head: out = RMSNorm_eps(o_h) x o_norm x
// sigmoid(gate_h) (norm first, then the gate), fp32 math, bf16 out, ready for o_proj.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct KdaOutNormParams {
    const float* o;         // [num_tokens, H x V] fp32
    const bf16* gate;       // g_proj x, [num_tokens, gate_stride]
    const float* o_norm;    // [V] fp32, shared by all heads
    bf16* out;              // [num_tokens, out_stride]
    i32 gate_stride;        // elements
    i32 out_stride;
    i32 num_tokens;
    i32 heads;
    float eps;
    i32 reserved;
};
KILN_PARAMS_SIZE(KdaOutNormParams, 56);
KILN_PARAMS_OFFSET(KdaOutNormParams, gate_stride, 32);
KILN_PARAMS_OFFSET(KdaOutNormParams, eps, 48);

}  // namespace kiln_params
