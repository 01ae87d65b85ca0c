// LatentMoE router selection (contract: templates/common/router_params.h). One warp per token row,
// kWarps rows per CTA; lane l holds experts l, l + 32, ... (kExperts / 32 rounded up, in registers).
// kTopK rounds of a warp argmax over the biased scores (ties to the lower id); the owner lane clears the
// winner and broadcasts its unbiased score. Lane 0 renormalises and writes the row.
#pragma once

#include "device/dense_common.cuh"
#include "common/router_params.h"

namespace kiln_dev {

template <int kExperts, int kTopK, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) router(const kiln_params::RouterParams p) {
    constexpr int kPer = (kExperts + 31) / 32;
    const int lane = threadIdx.x & 31;
    const i64 row = i64(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (row >= p.rows) return;
    const float* logits = p.logits + row * kExperts;
    float s[kPer], ch[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int e = lane + 32 * j;
        if (e < kExperts) {
            s[j] = sigmoid_f32(logits[e]);
            ch[j] = p.bias ? s[j] + p.bias[e] : s[j];
        } else {
            s[j] = 0.0f;
            ch[j] = -KILN_DEV_INF;
        }
    }
    int ids[kTopK];
    float ws[kTopK];
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kTopK; ++r) {
        float bv = -KILN_DEV_INF;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < kPer; ++j)
            if (better(ch[j], lane + 32 * j, bv, bi)) {
                bv = ch[j];
                bi = lane + 32 * j;
            }
        warp_argmax(bv, bi);
        float mine = 0.0f;
#pragma unroll
        for (int j = 0; j < kPer; ++j)
            if (lane + 32 * j == bi) {
                mine = s[j];
                ch[j] = -KILN_DEV_INF;
            }
        const float sv = __shfl_sync(0xffffffffu, mine, bi & 31);
        ids[r] = bi;
        ws[r] = sv;
        sum += sv;
    }
    if (lane == 0) {
        const float k = p.renormalize ? p.scale / (sum + 1e-20f) : p.scale;
#pragma unroll
        for (int r = 0; r < kTopK; ++r) {
            p.topk_ids[row * kTopK + r] = ids[r];
            p.topk_weights[row * kTopK + r] = ws[r] * k;
        }
    }
}

}  // namespace kiln_dev
