// mla_absorb: the per-head products with W_UK (mode q) and W_UV (mode out) of kv_b, batched over tokens
// (templates/common/mla_absorb_params.h). CUDA-core fp32 FMAs, bf16 in and out.
//   q:   a CTA is (head, 256 latent columns, 32 tokens): thread = column, the 32 query rows in shared memory,
//        each W_UK row read once (coalesced) per CTA; the rope part is copied by the first column block.
//   out: a CTA is (head, 64 value columns, 16 tokens): warp = value column (8 each), lanes split the latent
//        (coalesced W_UV rows), the 16 latent rows in shared memory; warp sums, then the gate.
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"
#include "common/mla_absorb_params.h"

namespace kiln_dev {
namespace mla {

using kiln_params::mla::AbsorbParams;

constexpr int kAbsorbThreads = 256;
constexpr int kAbsorbQTokens = 32;
constexpr int kAbsorbOutTokens = 16;
constexpr int kAbsorbOutCols = 64;

// Dynamic shared memory: q 32 x d_n floats, out 16 x d_c floats.
__global__ void __launch_bounds__(kAbsorbThreads) mla_absorb_q(const AbsorbParams p) {
    extern __shared__ float qsm[];  // [kAbsorbQTokens][d_n]
    const int ncb = (p.d_c + kAbsorbThreads - 1) / kAbsorbThreads;
    const int tbs = (p.num_tokens + kAbsorbQTokens - 1) / kAbsorbQTokens;
    const int cb = blockIdx.x % ncb, tb = blockIdx.x / ncb % tbs, h = blockIdx.x / ncb / tbs;
    const int t0 = tb * kAbsorbQTokens, nt = min(kAbsorbQTokens, p.num_tokens - t0);
    const int qw = p.d_n + p.d_r, cw = p.d_c + p.d_r;
    for (int i = threadIdx.x; i < kAbsorbQTokens * p.d_n; i += kAbsorbThreads) {
        const int ti = i / p.d_n, n = i % p.d_n;
        qsm[i] = ti < nt ? __bfloat162float(p.x[static_cast<long long>(t0 + ti) * p.x_stride + h * qw + n]) : 0.f;
    }
    __syncthreads();
    const int c = cb * kAbsorbThreads + threadIdx.x;
    if (c < p.d_c) {
        float acc[kAbsorbQTokens];
#pragma unroll
        for (int i = 0; i < kAbsorbQTokens; ++i) acc[i] = 0.f;
        const __nv_bfloat16* w = p.kv_b + static_cast<long long>(h) * (p.d_n + p.d_v) * p.d_c + c;
        for (int n = 0; n < p.d_n; ++n) {
            const float wv = __bfloat162float(w[static_cast<long long>(n) * p.d_c]);
#pragma unroll
            for (int i = 0; i < kAbsorbQTokens; ++i) acc[i] += qsm[i * p.d_n + n] * wv;
        }
#pragma unroll
        for (int i = 0; i < kAbsorbQTokens; ++i)
            if (i < nt) p.y[static_cast<long long>(t0 + i) * p.out_stride + h * cw + c] = __float2bfloat16(acc[i]);
    }
    if (cb == 0)
        for (int i = threadIdx.x; i < nt * p.d_r; i += kAbsorbThreads) {
            const int ti = i / p.d_r, r = i % p.d_r;
            p.y[static_cast<long long>(t0 + ti) * p.out_stride + h * cw + p.d_c + r] =
                p.x[static_cast<long long>(t0 + ti) * p.x_stride + h * qw + p.d_n + r];
        }
}

__global__ void __launch_bounds__(kAbsorbThreads) mla_absorb_out(const AbsorbParams p) {
    extern __shared__ float osm[];  // [kAbsorbOutTokens][d_c]
    const int njb = (p.d_v + kAbsorbOutCols - 1) / kAbsorbOutCols;
    const int tbs = (p.num_tokens + kAbsorbOutTokens - 1) / kAbsorbOutTokens;
    const int jb = blockIdx.x % njb, tb = blockIdx.x / njb % tbs, h = blockIdx.x / njb / tbs;
    const int t0 = tb * kAbsorbOutTokens, nt = min(kAbsorbOutTokens, p.num_tokens - t0);
    for (int i = threadIdx.x; i < kAbsorbOutTokens * p.d_c; i += kAbsorbThreads) {
        const int ti = i / p.d_c, c = i % p.d_c;
        osm[i] = ti < nt ? __bfloat162float(p.x[static_cast<long long>(t0 + ti) * p.x_stride + h * p.d_c + c]) : 0.f;
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int jj = warp; jj < kAbsorbOutCols; jj += kAbsorbThreads / 32) {
        const int j = jb * kAbsorbOutCols + jj;
        if (j >= p.d_v) break;
        const __nv_bfloat16* w = p.kv_b + (static_cast<long long>(h) * (p.d_n + p.d_v) + p.d_n + j) * p.d_c;
        float acc[kAbsorbOutTokens];
#pragma unroll
        for (int i = 0; i < kAbsorbOutTokens; ++i) acc[i] = 0.f;
        for (int c = 2 * lane; c < p.d_c; c += 64) {  // d_c is even (the launch checks)
            const float2 wv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(w + c));
#pragma unroll
            for (int i = 0; i < kAbsorbOutTokens; ++i) {
                const float2 o = *reinterpret_cast<const float2*>(osm + i * p.d_c + c);
                acc[i] += wv.x * o.x + wv.y * o.y;
            }
        }
#pragma unroll
        for (int i = 0; i < kAbsorbOutTokens; ++i)
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], d);
#pragma unroll
        for (int i = 0; i < kAbsorbOutTokens; ++i)
            if (lane == i && i < nt) {
                const long long o = static_cast<long long>(t0 + i) * p.out_stride + static_cast<long long>(h) * p.d_v + j;
                const float g = p.gate ? 1.0f / (1.0f + __expf(-__bfloat162float(p.gate[o]))) : 1.0f;
                p.y[o] = __float2bfloat16(acc[i] * g);
            }
    }
}

}  // namespace mla
}  // namespace kiln_dev
