// Family moe_w4a16_dequant: one expert matrix from the kernel layout to bf16, in layout row order.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params::moe {

struct DequantParams {
    const u8* weights;  // record base of the expert
    bf16* out;          // [n_pad, k_pad]
    i32 n_pad;
    i32 k_pad;
};
KILN_PARAMS_SIZE(DequantParams, 24);
KILN_PARAMS_OFFSET(DequantParams, n_pad, 16);

}  // namespace kiln_params::moe
