// RMSNorm on the host target (contract: templates/common/rmsnorm_params.h); rows or heads in parallel.
#pragma once

#include "host/dense_common.hpp"
#include "common/rmsnorm_params.h"

namespace kiln_host {

// kMode: 0 rows, 1 add, 2 heads.
template <int kMode>
inline void rmsnorm(const kiln_host_ctx* ctx, const kiln_params::RmsNormParams& p) {
    const i64 groups_per_row = p.cols / p.group;
    const i64 n = static_cast<i64>(p.rows) * groups_per_row;
    const i64 G = p.group;
    for_each(ctx, n, kMode == 2 ? 64 : 4, [&](i64 g) {
        const i64 base = (g / groups_per_row) * p.cols + (g % groups_per_row) * G;
        const u16* src = p.x + base;
        if (kMode == 1) {
            for (i64 c = 0; c < G; ++c) p.sum[base + c] = f32_to_bf16(ld(p.x, base + c) + ld(p.residual, base + c));
            src = p.sum + base;
        }
        float ss = 0.0f;
        for (i64 c = 0; c < G; ++c) {
            const float f = ld(src, c);
            ss += f * f;
        }
        const float inv = 1.0f / sqrtf_(ss / float(G) + p.eps);
        for (i64 c = 0; c < G; ++c) {
            float v = ld(src, c) * inv * ld(p.weight, c);
            if (kMode == 2 && p.gate) v *= sigmoid_(ld(p.gate, base + c));
            p.y[base + c] = f32_to_bf16(v);
        }
    });
}

}  // namespace kiln_host
