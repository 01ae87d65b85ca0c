// Family mla_absorb: the per-head products with the two halves of kv_b (per head h, rows
// h x (d_n + d_v) .. + d_n are W_UK^h [d_n, d_c], the next d_v rows W_UV^h [d_v, d_c]), batched over tokens.
//   mode q:   qt[t, h, 0:d_c] = W_UK^hᵀ q[t, h, 0:d_n]   and  qt[t, h, d_c:d_c+d_r] = q[t, h, d_n:d_n+d_r]
//             (the 576-wide absorbed query of K3: the latent part, then the rope part copied)
//   mode out: o[t, h x d_v + j] = (W_UV^h ō[t, h])_j,  times sigmoid(gate[t, h x d_v + j]) when gate is set
// fp32 accumulation, one bf16 rounding.
#pragma once

#include "common/kiln_params.h"

namespace kiln_params::mla {

struct AbsorbParams {
    const bf16* x;     // q: q [num_tokens, x_stride] (head h at h x (d_n + d_r)); out: ō [num_tokens, heads, d_c]
    const bf16* kv_b;  // [heads x (d_n + d_v), d_c]
    const bf16* gate;  // out: [num_tokens, out_stride] or null (no output gate); q: unused
    bf16* y;           // q: qt [num_tokens, heads, d_c + d_r]; out: o [num_tokens, out_stride]
    i32 num_tokens;
    i32 heads;
    i32 x_stride;      // elements between token rows of x (q: >= heads x (d_n + d_r); out: heads x d_c)
    i32 out_stride;    // elements between token rows of y and gate (out: >= heads x d_v; q: heads x (d_c + d_r))
    i32 d_n;
    i32 d_r;
    i32 d_v;
    i32 d_c;
};
KILN_PARAMS_SIZE(AbsorbParams, 64);
KILN_PARAMS_OFFSET(AbsorbParams, y, 24);
KILN_PARAMS_OFFSET(AbsorbParams, num_tokens, 32);
KILN_PARAMS_OFFSET(AbsorbParams, d_c, 60);

}  // namespace kiln_params::mla
