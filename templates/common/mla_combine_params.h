// Family mla_combine: merges the context pieces of the MLA attention (templates/common/mla_attention_params.h)
// for the tokens with more than one piece: ō = Σ_i w_i o_i / Σ_i w_i, w_i = exp(lse_i - max lse), bf16 out.
// Tokens with a single piece (written by the attention directly) are left alone.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params::mla {

struct CombineParams {
    const i32* token_pos;   // [num_tokens] (the step index's): n_t = ceil((token_pos[t] + 1) / split_keys)
    const float* part_o;    // [num_tokens x heads x splits, d_c]
    const float* part_lse;  // [num_tokens x heads x splits]
    bf16* out;              // [num_tokens, heads, d_c]
    i32 num_tokens;
    i32 heads;
    i32 splits;
    i32 split_keys;
    i32 d_c;
    i32 reserved;
};
KILN_PARAMS_SIZE(CombineParams, 56);
KILN_PARAMS_OFFSET(CombineParams, out, 24);
KILN_PARAMS_OFFSET(CombineParams, d_c, 48);

}  // namespace kiln_params::mla
