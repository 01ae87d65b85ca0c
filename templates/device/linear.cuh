// bf16 GEMM y = x · Wᵀ with fp32 accumulation (contract: templates/common/linear_params.h), the portable
// tensor-core path: mma.sync m16n8k16 (sm_80+). A CTA computes a kBM x kBN tile of y with
// kWarpsM x kWarpsN warps (each a (kBM / kWarpsM) x (kBN / kWarpsN) sub-tile of 16 x 8 MMAs). K advances
// 32 at a time through a two-stage cp.async ring of shared-memory tiles (x rows and W rows, K contiguous,
// rows padded by 8 values so the fragment loads hit distinct banks). Rows and columns past M / N are
// zero-filled on load and not stored; K must be a multiple of 8 (whole 16-byte pieces). Fragments are read
// from shared memory as 32-bit pairs in the mma.sync layout (group g = lane / 4, t = lane % 4):
//   A: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)     B: (k 2t.., n g), (k 2t+8.., n g)
//   C: (g, 2t..2t+1), (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"
#include "common/linear_params.h"

namespace kiln_dev {

__device__ __forceinline__ void linear_cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void linear_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void linear_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void linear_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int kBM, int kBN, int kWarpsM, int kWarpsN, bool kF32Out>
__global__ void __launch_bounds__(kWarpsM * kWarpsN * 32) linear_mma_sync(const kiln_params::LinearParams p) {
    constexpr int kThreads = kWarpsM * kWarpsN * 32;
    constexpr int kBK = 32, kLds = kBK + 8;
    constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;
    constexpr int kMT = kWM / 16, kNT = kWN / 8;
    static_assert(kWM % 16 == 0 && kWN % 8 == 0, "warp tiles are whole 16 x 8 MMAs");
    __shared__ __align__(16) __nv_bfloat16 As[2][kBM][kLds];
    __shared__ __align__(16) __nv_bfloat16 Bs[2][kBN][kLds];

    const int M = p.m, N = p.n, K = p.k;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;
    const int g = lane >> 2, t = lane & 3;
    const __nv_bfloat16* __restrict__ x = p.x;
    const __nv_bfloat16* __restrict__ w = p.w;

    auto load = [&](int buf, int k0) {
#pragma unroll 1
        for (int i = tid; i < kBM * 4; i += kThreads) {
            const int r = i >> 2, kc = (i & 3) * 8;
            const bool ok = m0 + r < M && k0 + kc < K;
            linear_cp_async16(&As[buf][r][kc], ok ? x + i64(m0 + r) * K + k0 + kc : x, ok);
        }
#pragma unroll 1
        for (int i = tid; i < kBN * 4; i += kThreads) {
            const int r = i >> 2, kc = (i & 3) * 8;
            const bool ok = n0 + r < N && k0 + kc < K;
            linear_cp_async16(&Bs[buf][r][kc], ok ? w + i64(n0 + r) * K + k0 + kc : w, ok);
        }
        linear_cp_commit();
    };

    float acc[kMT][kNT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    const int tiles = (K + kBK - 1) / kBK;
    load(0, 0);
#pragma unroll 1
    for (int kt = 0; kt < tiles; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < tiles) {
            load(buf ^ 1, (kt + 1) * kBK);
            linear_cp_wait<1>();
        } else {
            linear_cp_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            u32 a[kMT][4], b[kNT][2];
#pragma unroll
            for (int i = 0; i < kMT; ++i) {
                const int r = wm * kWM + i * 16 + g;
                a[i][0] = *reinterpret_cast<const u32*>(&As[buf][r][kk + 2 * t]);
                a[i][1] = *reinterpret_cast<const u32*>(&As[buf][r + 8][kk + 2 * t]);
                a[i][2] = *reinterpret_cast<const u32*>(&As[buf][r][kk + 2 * t + 8]);
                a[i][3] = *reinterpret_cast<const u32*>(&As[buf][r + 8][kk + 2 * t + 8]);
            }
#pragma unroll
            for (int j = 0; j < kNT; ++j) {
                const int c = wn * kWN + j * 8 + g;
                b[j][0] = *reinterpret_cast<const u32*>(&Bs[buf][c][kk + 2 * t]);
                b[j][1] = *reinterpret_cast<const u32*>(&Bs[buf][c][kk + 2 * t + 8]);
            }
#pragma unroll
            for (int i = 0; i < kMT; ++i)
#pragma unroll
                for (int j = 0; j < kNT; ++j) linear_mma(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = m0 + wm * kWM + i * 16 + g + (e >= 2 ? 8 : 0);
                const int c = n0 + wn * kWN + j * 8 + 2 * t + (e & 1);
                if (r < M && c < N) {
                    if (kF32Out) p.y_f32[i64(r) * N + c] = acc[i][j][e];
                    else p.y_bf16[i64(r) * N + c] = __float2bfloat16_rn(acc[i][j][e]);
                }
            }
}

}  // namespace kiln_dev
