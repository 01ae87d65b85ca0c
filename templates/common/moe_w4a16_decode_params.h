// Families moe_w4a16_decode and moe_w4a16_prefill: one routed-expert GEMM over the m-blocks of a routing
// (gate_up with the GLU into the bf16 intermediate, or down with the router weights, combined per token
// with fp32 atomics or written as one bf16 row per routed row for moe_w4a16_combine).
#pragma once

#include "common/kiln_params.h"

namespace kiln_params::moe {

struct DecodeParams {
    const u8* weights;      // record base of expert 0
    u64 expert_stride;      // bytes per expert
    const bf16* x;          // gate_up: activations [M, x_stride]; down: intermediate [rows, x_stride]
    i32 x_stride;           // elements
    i32 k_real;             // gate_up with a masked K: columns of x that exist
    i32 k_pad;              // inputs of the weight matrix in the layout (multiple of 64)
    i32 n_pad;              // rows of the weight matrix in the layout (multiple of 128)
    i32 n_real;             // down: output columns
    const i32* num_mblocks;
    const i32x2* mblock_info;
    const i32* sorted_token;
    const float* sorted_weight;
    i32 num_tokens;
    bf16* inter;            // gate_up output
    i32 inter_stride;
    float* acc;             // down, combined: fp32 accumulator [M, acc_stride], zero between calls
    i32 acc_stride;
    bf16* out;              // down combined: bf16 output [M, out_stride]; down rows: bf16 rows [rows, out_stride]
    i32 out_stride;
    i32* counters;          // down combined: [n_pad / 16], zero between calls
    // dynamic schedule (device only)
    i32* work;              // [2]: items claimed, producers finished; zero between calls
    float* split_acc;       // gate_up K-split partial sums, zero between calls
    i32* split_cnt;         // gate_up K-split counters: [split_cap x 4], zero between calls
    i32 split_cap;          // (m-block, super-block) items split_acc holds
    i32 k_chunk;            // 64-wide records per item along K; 0: whole K; < 0: automatic, chunks of at least
                            // -k_chunk records chosen from the real m-block count (about split_max_items items)
    i32 split_max_items;    // split K only while num_mblocks x n_pad / 128 <= this
    i32 order_window;       // claim order: windows of this many m-blocks (1: m-block major)
};
KILN_PARAMS_SIZE(DecodeParams, 184);
KILN_PARAMS_OFFSET(DecodeParams, num_mblocks, 48);
KILN_PARAMS_OFFSET(DecodeParams, inter, 88);
KILN_PARAMS_OFFSET(DecodeParams, acc, 104);
KILN_PARAMS_OFFSET(DecodeParams, out, 120);
KILN_PARAMS_OFFSET(DecodeParams, counters, 136);
KILN_PARAMS_OFFSET(DecodeParams, work, 144);
KILN_PARAMS_OFFSET(DecodeParams, split_cap, 168);
KILN_PARAMS_OFFSET(DecodeParams, order_window, 180);

}  // namespace kiln_params::moe
