// Helpers of the dense families (rmsnorm, glu, embedding, attn_res, router, sample): bf16 conversions,
// warp and CTA reductions. A CTA reduction is called by every thread of the CTA; `red` is 32 floats of
// shared memory, reused (it synchronises before writing).
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"

namespace kiln_dev {

#define KILN_DEV_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 to_bf16(float v) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* red) {
    static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
    constexpr int kWarps = kThreads / 32;
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) t += red[i];
    return t;
}

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* red) {
    constexpr int kWarps = kThreads / 32;
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = red[0];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) t = fmaxf(t, red[i]);
    return t;
}

// (value, index) argmax: the larger value, ties (and NaN-free equal values) to the lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
}

// CTA argmax; `rv` and `ri` are 32 floats / ints of shared memory.
template <int kThreads>
__device__ __forceinline__ void block_argmax(float& v, int& i, float* rv, int* ri) {
    constexpr int kWarps = kThreads / 32;
    warp_argmax(v, i);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        rv[threadIdx.x >> 5] = v;
        ri[threadIdx.x >> 5] = i;
    }
    __syncthreads();
    v = rv[0];
    i = ri[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
        if (better(rv[w], ri[w], v, i)) {
            v = rv[w];
            i = ri[w];
        }
}

}  // namespace kiln_dev
