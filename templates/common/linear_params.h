// Family linear: y[m, n] = Σ_k x[m, k] · w[n, k] (nn.Linear, W [N, K]), bf16 inputs, fp32 accumulation,
// bf16 (y_bf16) or fp32 (y_f32) output; exactly one of the two is set, as the kernel's config says.
// Contiguous rows; K a multiple of 8 and 16-byte aligned x and w (the launch checks).
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct LinearParams {
    const bf16* x;  // [m, k]
    const bf16* w;  // [n, k]
    bf16* y_bf16;   // [m, n]
    float* y_f32;   // [m, n]
    i32 m;
    i32 n;
    i32 k;
    i32 reserved;
};
KILN_PARAMS_SIZE(LinearParams, 48);
KILN_PARAMS_OFFSET(LinearParams, m, 32);

}  // namespace kiln_params
