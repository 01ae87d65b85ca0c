// Family glu: elementwise gates in fp32, bf16 in and out. Modes:
//   silu          out[r, c] = silu(in[r, c]) · in[r, cols + c]              (in = [gate | up], [rows, 2·cols])
//   situ          out[r, c] = β·tanh(g/β)·sigmoid(g) · β_lin·tanh(u/β_lin)   (same input; β_lin <= 0: u uncapped)
//   sigmoid_gate  out[r, c] = in[r, c] · sigmoid(gate[r, c])                (the attention output gates)
// Rows of `in` and `gate` are in_stride / gate_stride elements apart; out is contiguous [rows, cols].
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct GluParams {
    const bf16* in;
    const bf16* gate;  // sigmoid_gate only
    bf16* out;
    i64 rows;
    i32 cols;
    i32 in_stride;
    i32 gate_stride;
    float beta;         // situ
    float linear_beta;  // situ; <= 0: no cap on the up branch
    i32 reserved;
};
KILN_PARAMS_SIZE(GluParams, 56);
KILN_PARAMS_OFFSET(GluParams, rows, 24);
KILN_PARAMS_OFFSET(GluParams, linear_beta, 48);

}  // namespace kiln_params
