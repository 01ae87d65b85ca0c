// Family moe_w4a16_decode_fused: a whole decode call in one persistent launch (routing in every CTA's shared
// memory, gate_up, down rows, the per-token combine).
#pragma once

#include "common/moe_w4a16_decode_params.h"

namespace kiln_params::moe {

struct FusedDecodeParams {
    DecodeParams gate_up;       // gate_up fields; its work[] is the claim counter pair (its num_mblocks,
                                // mblock_info, sorted_token and sorted_weight are not read)
    DecodeParams down;          // down rows fields; out: router-weighted rows by slot [M x topk, out_stride]
    i32* gu_done;               // [mblock_cap] gate_up item parts finished per m-block, zero between calls
    u64* trace;                 // null, or [gate_up + down items + 3 x grid], zero (the ends are maxima)
    const i32* topk_ids;        // [M, topk]; ids outside [0, num_experts) are other ranks' experts
    const float* topk_weights;  // [M, topk]
    bf16* out;                  // [M, out_stride] the layer's output
    i32* dn_done;               // [1] down item parts finished, zero between calls
    i32* num_mblocks;           // null, or [1]: CTA 0 stores the call's m-block count (tests, traces)
    i32 topk;                   // at most 32
    i32 num_experts;
    i32 mblock_cap;             // m-blocks the routing area holds (the host sizes it so none are dropped)
    i32 out_stride;
    i32 k_groups;               // warp groups sharing each item: 1, 2 or 4
    i32 reserved;
};
KILN_PARAMS_SIZE(FusedDecodeParams, 448);
KILN_PARAMS_OFFSET(FusedDecodeParams, gu_done, 368);
KILN_PARAMS_OFFSET(FusedDecodeParams, trace, 376);
KILN_PARAMS_OFFSET(FusedDecodeParams, num_mblocks, 416);
KILN_PARAMS_OFFSET(FusedDecodeParams, out_stride, 436);
KILN_PARAMS_OFFSET(FusedDecodeParams, k_groups, 440);

}  // namespace kiln_params::moe
