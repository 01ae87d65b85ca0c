// Attention Residuals mixing (contract: templates/common/attn_res_params.h). One CTA of kThreads per
// token row. Pass 1: per candidate the sum of squares and the dot with `score`, in registers (up to
// kMaxCand candidates), then one CTA reduction of all of them; every thread forms the softmax. Pass 2:
// the weighted sum of the raw candidates.
#pragma once

#include "device/dense_common.cuh"
#include "common/attn_res_params.h"

namespace kiln_dev {

constexpr int kAttnResMaxCand = 16;

template <int kThreads>
__global__ void __launch_bounds__(kThreads) attn_res(const kiln_params::AttnResParams p) {
    constexpr int kWarps = kThreads / 32;
    constexpr int kMax = kAttnResMaxCand;
    __shared__ float red[kWarps][2 * kMax];
    __shared__ float weight[kMax];
    const i64 row = blockIdx.x;
    if (row >= p.rows) return;
    const int n = p.blocks + 1, dim = p.dim;
    const __nv_bfloat16* cand[kMax];
#pragma unroll
    for (int i = 0; i < kMax; ++i)
        cand[i] = i < p.blocks ? p.bank + i * p.block_stride + row * dim : p.current + row * dim;
    float ss[kMax], dt[kMax];
#pragma unroll
    for (int i = 0; i < kMax; ++i) ss[i] = dt[i] = 0.0f;
    for (int c = threadIdx.x; c < dim; c += kThreads) {
        const float sw = p.score[c];
#pragma unroll
        for (int i = 0; i < kMax; ++i)
            if (i < n) {
                const float v = to_f32(cand[i][c]);
                ss[i] += v * v;
                dt[i] += v * sw;
            }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < kMax; ++i)
        if (i < n) {
            const float a = warp_sum(ss[i]), b = warp_sum(dt[i]);
            if (lane == 0) {
                red[warp][2 * i] = a;
                red[warp][2 * i + 1] = b;
            }
        }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s[kMax], mx = -KILN_DEV_INF;
        for (int i = 0; i < n; ++i) {
            float a = 0.0f, b = 0.0f;
            for (int w = 0; w < kWarps; ++w) {
                a += red[w][2 * i];
                b += red[w][2 * i + 1];
            }
            s[i] = b * rsqrtf(a / float(dim) + p.eps);
            mx = fmaxf(mx, s[i]);
        }
        float total = 0.0f;
        for (int i = 0; i < n; ++i) total += (s[i] = expf(s[i] - mx));
        for (int i = 0; i < n; ++i) weight[i] = s[i] / total;
    }
    __syncthreads();
    __nv_bfloat16* out = p.out + row * dim;
    for (int c = threadIdx.x; c < dim; c += kThreads) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < kMax; ++i)
            if (i < n) acc += weight[i] * to_f32(cand[i][c]);
        out[c] = to_bf16(acc);
    }
}

}  // namespace kiln_dev
