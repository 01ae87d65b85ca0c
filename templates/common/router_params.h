// Family router: the LatentMoE router after its fp32 matmul (k3-model §5). Per token row:
// s = sigmoid(logits); the top-k experts by s + bias (bias for the choice only; ties to the lower id), in
// descending order; weights = the UNBIASED s of those experts, divided by (Σ s + 1e-20) when renormalize,
// times `scale` (routed_scaling_factor). Outputs as moe_w4a16 reads them: i32 ids and f32 weights [rows, k].
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct RouterParams {
    const float* logits;  // [rows, experts]
    const float* bias;    // [experts] or null
    i32* topk_ids;        // [rows, k]
    float* topk_weights;  // [rows, k]
    i32 rows;
    i32 renormalize;
    float scale;
    i32 reserved;
};
KILN_PARAMS_SIZE(RouterParams, 48);
KILN_PARAMS_OFFSET(RouterParams, rows, 32);

}  // namespace kiln_params
