// Elementwise gates on the host target (contract: templates/common/glu_params.h); rows in parallel.
// kMode: 0 silu, 1 situ, 2 sigmoid_gate.
#pragma once

#include "host/dense_common.hpp"
#include "common/glu_params.h"

namespace kiln_host {

template <int kMode>
inline void glu(const kiln_host_ctx* ctx, const kiln_params::GluParams& p) {
    const float beta = p.beta, lin = p.linear_beta;
    const i64 cols = p.cols;
    for_each(ctx, p.rows, 8, [&](i64 r) {
        const u16* in = p.in + r * p.in_stride;
        u16* out = p.out + r * cols;
        for (i64 c = 0; c < cols; ++c) {
            const float a = ld(in, c);
            float v;
            if (kMode == 2) {
                v = a * sigmoid_(ld(p.gate, r * p.gate_stride + c));
            } else {
                const float u = ld(in, cols + c);
                if (kMode == 0) {
                    v = a * sigmoid_(a) * u;
                } else {
                    const float up = lin > 0.0f ? lin * tanhf_(u / lin) : u;
                    v = beta * tanhf_(a / beta) * sigmoid_(a) * up;
                }
            }
            out[c] = f32_to_bf16(v);
        }
    });
}

}  // namespace kiln_host
