// Families mla_decode and mla_prefill: absorbed MLA attention over the paged latent cache (NoPE: nothing is
// rotated). The query of token t, head h is qt[t, h] = (q̃, q_rope), d_c + d_r values (family mla_absorb, mode
// q); key j of its sequence is the cache row (ĉ_j, k_rope_j) and its value ĉ_j:
//   s_j = scale x qt[t, h] · row_j   for j <= p (p = idx.token_pos[t]: causal, the chunk's own rows included,
//                                     so the chunk is appended to the pages first)
//   ō[t, h] = Σ_j softmax(s)_j ĉ_j   (d_c values)
// The context is split into pieces of split_keys keys: token t has n_t = ceil((p + 1) / split_keys) pieces.
// A token with n_t == 1 gets ō written to `out` (bf16) directly; otherwise piece i writes its normalised
// partial output to part_o[(t x heads + h) x splits + i] (fp32, d_c values) and its natural-log sum of
// exponentials to part_lse[(t x heads + h) x splits + i], and family mla_combine merges them.
// `only` picks the sequences a launch serves: 0 all, 1 those with one new token (decodes), 2 the others.
#pragma once

#include "common/kiln_params.h"
#include "common/step_index_params.h"

namespace kiln_params::mla {

struct AttentionParams {
    StepIndex idx;
    const bf16* q;     // [num_tokens, heads, d_c + d_r]
    bf16* out;         // [num_tokens, heads, d_c]
    float* part_o;     // [num_tokens x heads x splits, d_c]
    float* part_lse;   // [num_tokens x heads x splits]
    u64 layer_offset;  // this MLA layer's bytes inside a page
    float scale;       // 1 / sqrt(d_n + d_r)
    i32 heads;
    i32 splits;        // pieces per token row in part_o (the grid's second dimension)
    i32 split_keys;    // keys per piece, a multiple of 64
    i32 only;          // 0 all sequences, 1 single-token ones, 2 multi-token ones
    i32 reserved;
};
KILN_PARAMS_SIZE(AttentionParams, 192);
KILN_PARAMS_OFFSET(AttentionParams, q, 128);
KILN_PARAMS_OFFSET(AttentionParams, layer_offset, 160);
KILN_PARAMS_OFFSET(AttentionParams, scale, 168);
KILN_PARAMS_OFFSET(AttentionParams, reserved, 188);

}  // namespace kiln_params::mla
