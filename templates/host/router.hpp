// LatentMoE router selection on the host target (contract: templates/common/router_params.h); rows in
// parallel, kTopK selection passes over the biased scores (ties to the lower id).
#pragma once

#include "host/dense_common.hpp"
#include "common/router_params.h"

namespace kiln_host {

template <int kExperts, int kTopK>
inline void router(const kiln_host_ctx* ctx, const kiln_params::RouterParams& p) {
    for_each(ctx, p.rows, 4, [&](i64 row) {
        const float* logits = p.logits + row * kExperts;
        float s[kExperts], ch[kExperts];
        for (int e = 0; e < kExperts; ++e) {
            s[e] = sigmoid_(logits[e]);
            ch[e] = p.bias ? s[e] + p.bias[e] : s[e];
        }
        int ids[kTopK];
        float sum = 0.0f;
        for (int r = 0; r < kTopK; ++r) {
            int bi = -1;
            float bv = -k_inf;
            for (int e = 0; e < kExperts; ++e)
                if (bi < 0 || better(ch[e], e, bv, bi)) {
                    bv = ch[e];
                    bi = e;
                }
            ids[r] = bi;
            ch[bi] = -k_inf;
            sum += s[bi];
        }
        const float k = p.renormalize ? p.scale / (sum + 1e-20f) : p.scale;
        for (int r = 0; r < kTopK; ++r) {
            p.topk_ids[row * kTopK + r] = ids[r];
            p.topk_weights[row * kTopK + r] = s[ids[r]] * k;
        }
    });
}

}  // namespace kiln_host
