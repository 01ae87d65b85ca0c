// Family moe_routing: routing prep for an indexed MoE GEMM. Top-k ids -> flat row indices grouped by expert
// (stable), each expert padded to block_m rows (sentinel num_tokens x topk), the expert of every block_m-row
// block (-1 past the end), tokens per expert and the total padded row count.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct MoeRoutingParams {
    const i32* topk_ids;     // [num_tokens x topk]
    i32* sorted_ids;         // [sorted_capacity]
    i32* block_expert;       // [max_blocks]
    i32* tokens_per_expert;  // [experts]
    i32* total_padded;       // [1]
    i32 num_tokens;
    i32 sorted_capacity;
    i32 max_blocks;
    i32 reserved;
};
KILN_PARAMS_SIZE(MoeRoutingParams, 56);
KILN_PARAMS_OFFSET(MoeRoutingParams, num_tokens, 40);

}  // namespace kiln_params
