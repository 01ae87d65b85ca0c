// Family moe_w4a16_route: top-k ids -> per-expert rows in m-blocks of block_m (the decode and prefill GEMMs'
// input order), each m-block's expert and rows, and optionally the sorted row of every routed slot.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params::moe {

struct RoutingParams {
    const i32* topk_ids;        // [num_tokens, topk]; ids outside [0, num_experts) are skipped (other EP ranks)
    const float* topk_weights;  // [num_tokens, topk]
    i32* expert_count;          // [num_experts] scratch
    i32* num_mblocks;           // [1]
    i32x2* mblock_info;         // [mblock_cap]: (expert, first sorted row)
    i32* sorted_token;          // [mblock_cap x block_m]
    float* sorted_weight;       // [mblock_cap x block_m]
    i32 num_tokens;
    i32 topk;
    i32 num_experts;
    i32 mblock_cap;  // capacity of mblock_info; blocks beyond it are dropped (the host sizes it so none are)
    i32* slot_pos;   // optional [num_tokens x topk]: the sorted row of each slot, -1 when it has none
};
KILN_PARAMS_SIZE(RoutingParams, 80);
KILN_PARAMS_OFFSET(RoutingParams, num_tokens, 56);
KILN_PARAMS_OFFSET(RoutingParams, mblock_cap, 68);
KILN_PARAMS_OFFSET(RoutingParams, slot_pos, 72);

}  // namespace kiln_params::moe
