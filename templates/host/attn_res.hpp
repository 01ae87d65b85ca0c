// Attention Residuals mixing on the host target (contract: templates/common/attn_res_params.h); rows in
// parallel, the same two passes as the device kernel.
#pragma once

#include "host/dense_common.hpp"
#include "common/attn_res_params.h"

namespace kiln_host {

constexpr int k_attn_res_max_cand = 16;

inline void attn_res(const kiln_host_ctx* ctx, const kiln_params::AttnResParams& p) {
    const i64 dim = p.dim;
    const int n = p.blocks + 1;
    for_each(ctx, p.rows, 2, [&](i64 row) {
        const u16* cand[k_attn_res_max_cand];
        for (int i = 0; i < n; ++i)
            cand[i] = i < p.blocks ? p.bank + i * p.block_stride + row * dim : p.current + row * dim;
        float s[k_attn_res_max_cand];
        float mx = -k_inf;
        for (int i = 0; i < n; ++i) {
            float ss = 0.0f, dt = 0.0f;
            for (i64 c = 0; c < dim; ++c) {
                const float v = ld(cand[i], c);
                ss += v * v;
                dt += v * p.score[c];
            }
            s[i] = dt / sqrtf_(ss / float(dim) + p.eps);
            mx = s[i] > mx ? s[i] : mx;
        }
        float total = 0.0f;
        for (int i = 0; i < n; ++i) total += (s[i] = expf_(s[i] - mx));
        for (int i = 0; i < n; ++i) s[i] /= total;
        u16* out = p.out + row * dim;
        for (i64 c = 0; c < dim; ++c) {
            float acc = 0.0f;
            for (int i = 0; i < n; ++i) acc += s[i] * ld(cand[i], c);
            out[c] = f32_to_bf16(acc);
        }
    });
}

}  // namespace kiln_host
