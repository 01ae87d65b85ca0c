// Dequantising GEMV for INT4 group-32 weights with bf16 scales (compressed-tensors pack-quantized):
//   y[m, n] = sum_k x[m, k] * w[n, k],   w[n, k] = (code(n, k) - 8) * scale[n, k / 32]
// weight_packed: u32 [N, K/8], eight 4-bit codes per word, least significant nibble first.
// weight_scale:  bf16 [N, K/32].  x: bf16 [m, K] (m <= kMaxM).  y: bf16 [m, N].
//
// One warp per output row n; lane l handles groups l, l+32, ... of that row: one 16-byte load brings
// the group's 32 codes, dequantised in fp32 (subtract, then scale), multiplied with x in fp32 and
// accumulated in fp32; a warp reduction finishes each y[m, n]. Requires K % 32 == 0 and 16-byte aligned
// x and weight_packed rows (checked by the launch helper).
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"
#include "common/dequant_gemv_params.h"

namespace kiln_dev {

__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float* out) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = __uint_as_float(w[i] << 16);
        out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

template <int kN, int kK, int kMaxM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
dequant_gemv_int4_g32(const kiln_params::DequantGemvParams p) {
    static_assert(kK % 32 == 0, "K must be a multiple of the group size 32");
    const __nv_bfloat16* __restrict__ x = p.x;
    const u32* __restrict__ weight_packed = p.weight_packed;
    const __nv_bfloat16* __restrict__ weight_scale = p.weight_scale;
    __nv_bfloat16* __restrict__ y = p.y;
    const i32 m = p.m;
    constexpr int kGroups = kK / 32;
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= kN) return;

    const uint4* wrow = reinterpret_cast<const uint4*>(weight_packed + static_cast<i64>(row) * (kK / 8));
    const __nv_bfloat16* srow = weight_scale + static_cast<i64>(row) * kGroups;

    float acc[kMaxM];
#pragma unroll
    for (int r = 0; r < kMaxM; ++r) acc[r] = 0.f;

    for (int g = lane; g < kGroups; g += 32) {
        const uint4 q = __ldg(wrow + g);
        const float s = __bfloat162float(srow[g]);
        float wv[32];
        const u32 words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) wv[i * 8 + j] = static_cast<float>(static_cast<int>((words[i] >> (4 * j)) & 0xfu) - 8) * s;
#pragma unroll
        for (int r = 0; r < kMaxM; ++r) {
            if (r < m) {
                const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<i64>(r) * kK + g * 32);
                float xv[8];
                float sum = 0.f;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    bf16x8_to_f32(__ldg(xr + c), xv);
#pragma unroll
                    for (int t = 0; t < 8; ++t) sum = fmaf(xv[t], wv[c * 8 + t], sum);
                }
                acc[r] += sum;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kMaxM; ++r) {
        float v = acc[r];
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
        if (lane == 0 && r < m) y[static_cast<i64>(r) * kN + row] = __float2bfloat16_rn(v);
    }
}

}  // namespace kiln_dev
