// Family kda_decode: one recurrent KDA step for every sequence of the step with exactly one new token
// (others are left to kda_chunk): S' = Diag(exp g) S; S = S' + k (beta (v - S'^T k))^T; o = S^T q, with the
// fp32 state [H, K, V] (key-major) of the working slot updated in place, and copied to the snapshot slot
// when the step has a snapshot at the new position.
#pragma once

#include "common/kiln_params.h"
#include "common/step_index_params.h"

namespace kiln_params {

struct KdaDecodeParams {
    StepIndex idx;
    const float* q;         // [num_tokens, H x K] (kda_prep's outputs)
    const float* k;
    const float* v;
    const float* g;
    const float* beta;      // [num_tokens, H]
    float* o;               // [num_tokens, H x V]
    u64 state_offset;       // bytes from a slot's start to this layer's recurrent state
    i32 heads;
    i32 reserved;
};
KILN_PARAMS_SIZE(KdaDecodeParams, 192);
KILN_PARAMS_OFFSET(KdaDecodeParams, q, 128);
KILN_PARAMS_OFFSET(KdaDecodeParams, state_offset, 176);
KILN_PARAMS_OFFSET(KdaDecodeParams, heads, 184);

}  // namespace kiln_params
