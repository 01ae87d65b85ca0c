// Family attn_res: the Attention Residuals mix of one site (k3-model §4.2) for every token row. Candidates
// are the banked blocks (block b's row t at bank + b·block_stride + t·dim) and then `current` (the partial
// sum P). In fp32: s_i = Σ_c V_i[c]·score[c] / sqrt(mean(V_i²) + eps), where score = γ ⊙ w folded at load;
// out = Σ_i softmax(s)_i · V_i, mixing the RAW candidates. At most 16 candidates.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct AttnResParams {
    const bf16* bank;     // [blocks] x [rows, dim], block_stride elements apart
    const bf16* current;  // [rows, dim]
    const float* score;   // [dim]
    bf16* out;            // [rows, dim]
    i64 block_stride;
    i32 blocks;
    i32 rows;
    i32 dim;
    float eps;
};
KILN_PARAMS_SIZE(AttnResParams, 56);
KILN_PARAMS_OFFSET(AttnResParams, block_stride, 32);
KILN_PARAMS_OFFSET(AttnResParams, eps, 52);

}  // namespace kiln_params
