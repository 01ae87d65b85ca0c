// Family rmsnorm: y = x / sqrt(mean(x²) + eps) ⊙ weight in fp32, bf16 in and out. Modes:
//   rows   one norm over each row's `cols` values (group == cols)
//   add    s = x + residual is written to `sum` (bf16; it may alias x or residual), then y = norm(s)
//          of that rounded sum, as the next layer sees it
//   heads  one norm per group of `group` values (a head); weight has `group` values shared by all heads;
//          with `gate` (bf16 [rows, cols]) y is also multiplied by sigmoid(gate) (the KDA output norm)
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct RmsNormParams {
    const bf16* x;         // [rows, cols]
    const bf16* residual;  // add: [rows, cols]
    bf16* sum;             // add: [rows, cols]
    const bf16* weight;    // [group]
    const bf16* gate;      // heads: [rows, cols] or null
    bf16* y;               // [rows, cols]
    i32 rows;
    i32 cols;
    i32 group;             // values per norm: cols (rows, add) or the head size (heads)
    float eps;
};
KILN_PARAMS_SIZE(RmsNormParams, 64);
KILN_PARAMS_OFFSET(RmsNormParams, rows, 48);
KILN_PARAMS_OFFSET(RmsNormParams, eps, 60);

}  // namespace kiln_params
