// Family dequant_gemv: y[m, N] = x[m, K] * dequant(W)[N, K]^T for INT4 group-32 weights with bf16 scales.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct DequantGemvParams {
    const bf16* x;             // [m, K]
    const u32* weight_packed;  // [N, K/8]: eight codes per word, least significant nibble first, code = q + 8
    const bf16* weight_scale;  // [N, K/32]
    bf16* y;                   // [m, N]
    i32 m;                     // rows of x, 1 .. the kernel's M-bucket
    i32 reserved;
};
KILN_PARAMS_SIZE(DequantGemvParams, 40);
KILN_PARAMS_OFFSET(DequantGemvParams, m, 32);

}  // namespace kiln_params
