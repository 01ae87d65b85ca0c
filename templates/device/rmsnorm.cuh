// RMSNorm, fp32 math over bf16 rows (contract: templates/common/rmsnorm_params.h).
//   rows / add: one CTA of kThreads per row; two passes over the row (sum of squares, then the scaled
//               output); in add mode the first pass writes the rounded sum and the second reads it back
//               (each thread its own elements, so `sum` may alias x or residual).
//   heads:      one warp per (row, head), kThreads / 32 heads per CTA; optional sigmoid gate.
#pragma once

#include "device/dense_common.cuh"
#include "common/rmsnorm_params.h"

namespace kiln_dev {

// kMode: 0 rows, 1 add.
template <int kMode, int kThreads>
__global__ void __launch_bounds__(kThreads) rmsnorm_rows(const kiln_params::RmsNormParams p) {
    __shared__ float red[32];
    const i64 row = blockIdx.x;
    if (row >= p.rows) return;
    const int cols = p.cols;
    const __nv_bfloat16* __restrict__ x = p.x + row * cols;
    const __nv_bfloat16* __restrict__ w = p.weight;
    __nv_bfloat16* __restrict__ y = p.y + row * cols;
    float ss = 0.0f;
    if (kMode == 1) {
        const __nv_bfloat16* r = p.residual + row * cols;
        __nv_bfloat16* s = p.sum + row * cols;
        for (int c = threadIdx.x; c < cols; c += kThreads) {
            const __nv_bfloat16 v = to_bf16(to_f32(x[c]) + to_f32(r[c]));
            s[c] = v;
            const float f = to_f32(v);
            ss += f * f;
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += kThreads) {
            const float f = to_f32(x[c]);
            ss += f * f;
        }
    }
    ss = block_sum<kThreads>(ss, red);
    const float inv = rsqrtf(ss / float(cols) + p.eps);
    const __nv_bfloat16* src = kMode == 1 ? p.sum + row * cols : x;
    for (int c = threadIdx.x; c < cols; c += kThreads) y[c] = to_bf16(to_f32(src[c]) * inv * to_f32(w[c]));
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) rmsnorm_heads(const kiln_params::RmsNormParams p) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31;
    const int heads = p.cols / p.group;
    const i64 g = i64(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (g >= i64(p.rows) * heads) return;
    const i64 base = (g / heads) * p.cols + (g % heads) * p.group;
    const __nv_bfloat16* __restrict__ x = p.x + base;
    float ss = 0.0f;
    for (int c = lane; c < p.group; c += 32) {
        const float f = to_f32(x[c]);
        ss += f * f;
    }
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / float(p.group) + p.eps);
    const __nv_bfloat16* gate = p.gate ? p.gate + base : nullptr;
    for (int c = lane; c < p.group; c += 32) {
        float v = to_f32(x[c]) * inv * to_f32(p.weight[c]);
        if (gate) v *= sigmoid_f32(to_f32(gate[c]));
        p.y[base + c] = to_bf16(v);
    }
}

}  // namespace kiln_dev
