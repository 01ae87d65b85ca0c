// Family moe_w4a16_combine: sums each token's router-weighted down rows in slot order (fp32, one rounding).
#pragma once

#include "common/kiln_params.h"

namespace kiln_params::moe {

struct CombineParams {
    const bf16* rows;     // [*, rows_stride]
    i32 rows_stride;
    const i32* slot_pos;  // [num_tokens x topk]: sorted row of each slot, -1: none
    i32 num_tokens;
    i32 topk;
    i32 n;                // columns
    bf16* out;            // [num_tokens, out_stride]
    i32 out_stride;
    i32 row_tile;         // 0: row pos at pos x rows_stride; > 0: tiles of row_tile rows x 64 columns
};
KILN_PARAMS_SIZE(CombineParams, 56);
KILN_PARAMS_OFFSET(CombineParams, slot_pos, 16);
KILN_PARAMS_OFFSET(CombineParams, out, 40);
KILN_PARAMS_OFFSET(CombineParams, row_tile, 52);

}  // namespace kiln_params::moe
