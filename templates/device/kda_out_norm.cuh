// kda_out_norm on the device (contract: templates/common/kda_out_norm_params.h): one warp per (token,
// head), K/32 values per lane, the mean square reduced across the warp.
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"
#include "common/kda_out_norm_params.h"

namespace kiln_dev {
namespace kda {

using kiln_params::KdaOutNormParams;

constexpr int kOutNormThreads = 128;

template <int K>
__global__ void __launch_bounds__(kOutNormThreads) kda_out_norm(const KdaOutNormParams p) {
    constexpr int C = K / 32;
    const int lane = threadIdx.x & 31;
    const long long w = (static_cast<long long>(blockIdx.x) * kOutNormThreads + threadIdx.x) >> 5;
    if (w >= static_cast<long long>(p.num_tokens) * p.heads) return;
    const long long t = w / p.heads, h = w % p.heads;
    const float* o = p.o + t * p.heads * K + h * K + lane * C;
    float x[C], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < C; ++i) {
        x[i] = o[i];
        ss = fmaf(x[i], x[i], ss);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, d);
    const float r = rsqrtf(ss / K + p.eps);
#pragma unroll
    for (int i = 0; i < C; ++i) {
        const int c = lane * C + i;
        const float gate = __bfloat162float(p.gate[t * p.gate_stride + h * K + c]);
        p.out[t * p.out_stride + h * K + c] = __float2bfloat16(x[i] * r * p.o_norm[c] / (1.0f + __expf(-gate)));
    }
}

}  // namespace kda
}  // namespace kiln_dev
