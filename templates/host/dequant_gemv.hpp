// Dequantising GEMV for INT4 group-32 weights with bf16 scales on the host target; the same contract
// as templates/device/dequant_gemv.cuh:
//   y[m, n] = sum_k x[m, k] * w[n, k],   w[n, k] = (code(n, k) - 8) * scale[n, k / 32]
// weight_packed: u32 [N, K/8], eight 4-bit codes per word, least significant nibble first.
// weight_scale:  bf16 [N, K/32].  x: bf16 [m, K] (1 <= m <= kMaxM).  y: bf16 [m, N].
// Dequantisation is exact in fp32 (subtract, then scale: one rounding), products accumulate in fp32.
//
// Vectorised over 8 lanes with clang's generic vectors (AVX2 on x86-64, NEON pairs on AArch64).
// Eight packed words hold 64 codes; shifting all eight right by 4j and masking gives the codes
// {k : k % 8 == j} of that 64-code block in one vector. x is therefore converted to fp32 once per
// launch into scratch memory in the matching order (xs[r][block][j][lane] = x[r][64*block + 8*lane
// + j]), and every weight row then costs per 64 codes: one load, and per j a shift, mask, convert
// and two FMAs (the first dequantises: (c - 8) * s == fma(c, s, -8 s) exactly). A K that is an odd
// number of groups ends with a 32-code block done the same way on 4 lanes. Rows of W are split over
// the thread pool; every row is read once for all m rows of x.
#pragma once

#include "host/prelude.hpp"
#include "common/dequant_gemv_params.h"

namespace kiln_host {

using DequantGemvArgs = kiln_params::DequantGemvParams;

typedef float f32x8 __attribute__((ext_vector_type(8)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef u32 u32x8 __attribute__((ext_vector_type(8)));
typedef u32 u32x4 __attribute__((ext_vector_type(4)));

// Scratch bytes the kernel needs: x in fp32, permuted.
constexpr i64 dequant_gemv_scratch_bytes(i64 max_m, i64 k) { return max_m * k * 4; }

// y[r0 .. r0+R, n] for one weight row n: R rows of x share every dequantised weight vector.
template <int kN, int kK, int R>
inline void dequant_gemv_row_tile(const DequantGemvArgs& a, const float* xs, int r0, i64 n) {
    constexpr i64 kBlocks = kK / 64;        // full 64-code blocks per row
    constexpr bool kTail = (kK % 64) != 0;  // one trailing 32-code group
    constexpr i64 kGroups = kK / 32;
    const u32* w = a.weight_packed + n * (kK / 8);
    const u16* s = a.weight_scale + n * kGroups;
    const float* x0 = xs + static_cast<i64>(r0) * kK;

    // Independent accumulator chains per row so FMA latency does not serialise the loop.
    constexpr int kChains = R >= 4 ? 1 : (R >= 2 ? 2 : 4);
    f32x8 acc[R][kChains];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < kChains; ++c) acc[r][c] = 0.f;
    for (i64 blk = 0; blk < kBlocks; ++blk) {
        u32x8 q;
        __builtin_memcpy(&q, w + blk * 8, 32);
        const float s0 = bf16_to_f32(s[2 * blk]), s1 = bf16_to_f32(s[2 * blk + 1]);
        const f32x8 sv = {s0, s0, s0, s0, s1, s1, s1, s1};
        const f32x8 bias = sv * -8.0f;
        const float* xb = x0 + blk * 64;
#pragma clang loop unroll(full)
        for (int j = 0; j < 8; ++j) {
            const f32x8 wj = __builtin_convertvector((q >> (4 * j)) & 0xfu, f32x8) * sv + bias;
#pragma clang loop unroll(full)
            for (int r = 0; r < R; ++r) {
                f32x8 xv;
                __builtin_memcpy(&xv, xb + r * kK + j * 8, 32);
                acc[r][j % kChains] += wj * xv;
            }
        }
    }
    float tail[R];
    for (int r = 0; r < R; ++r) tail[r] = 0.f;
    if constexpr (kTail) {
        u32x4 q;
        __builtin_memcpy(&q, w + kBlocks * 8, 16);
        const f32x4 sv = bf16_to_f32(s[kGroups - 1]);
        const f32x4 bias = sv * -8.0f;
        const float* xb = x0 + kBlocks * 64;
        f32x4 acc4[R];
        for (int r = 0; r < R; ++r) acc4[r] = 0.f;
#pragma clang loop unroll(full)
        for (int j = 0; j < 8; ++j) {
            const f32x4 wj = __builtin_convertvector((q >> (4 * j)) & 0xfu, f32x4) * sv + bias;
#pragma clang loop unroll(full)
            for (int r = 0; r < R; ++r) {
                f32x4 xv;
                __builtin_memcpy(&xv, xb + r * kK + j * 4, 16);
                acc4[r] += wj * xv;
            }
        }
        for (int r = 0; r < R; ++r) tail[r] = (acc4[r].x + acc4[r].y) + (acc4[r].z + acc4[r].w);
    }
    for (int r = 0; r < R; ++r) {
        f32x8 v = acc[r][0];
        for (int c = 1; c < kChains; ++c) v += acc[r][c];
        const float sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])) + tail[r];
        a.y[static_cast<i64>(r0 + r) * kN + n] = f32_to_bf16(sum);
    }
}

template <int kN, int kK, int kMaxM>
inline void dequant_gemv_int4_g32(const kiln_host_ctx* ctx, const DequantGemvArgs& a) {
    static_assert(kK % 32 == 0, "K must be a multiple of the group size 32");
    static_assert(kMaxM >= 1 && kMaxM <= 16, "M-bucket 1..16");
    constexpr i64 kBlocks = kK / 64;
    constexpr bool kTail = (kK % 64) != 0;
    constexpr int kTile = kMaxM < 4 ? kMaxM : 4;  // rows of x per pass over a weight row

    const int m = a.m < 1 ? 1 : (a.m > kMaxM ? kMaxM : a.m);
    float* xs = static_cast<float*>(ctx->scratch);

    // 1. x (bf16) -> fp32 in the lane order of the weight unpacking.
    auto permute = [&](i64 b, i64 e) {
        for (i64 t = b; t < e; ++t) {
            const i64 r = t / (kBlocks + (kTail ? 1 : 0)), blk = t % (kBlocks + (kTail ? 1 : 0));
            const u16* src = a.x + r * kK + blk * 64;
            float* dst = xs + r * kK + blk * 64;
            const int lanes = blk < kBlocks ? 8 : 4;
            for (int j = 0; j < 8; ++j)
                for (int l = 0; l < lanes; ++l) dst[j * lanes + l] = bf16_to_f32(src[8 * l + j]);
        }
    };
    constexpr i64 kChunksPerRow = kBlocks + (kTail ? 1 : 0);
    const i64 xwork = static_cast<i64>(m) * kChunksPerRow;
    if (xwork * 64 < 32768) permute(0, xwork);
    else parallel_for(ctx, xwork, 64, permute);

    // 2. One pass over the weight rows; each row is used for all m rows of x, kTile at a time,
    //    while it is in L1.
    auto rows = [&](i64 n0, i64 n1) {
        for (i64 n = n0; n < n1; ++n) {
            for (int r0 = 0; r0 < m; r0 += kTile) {
                const int left = m - r0;
                if (left >= kTile) dequant_gemv_row_tile<kN, kK, kTile>(a, xs, r0, n);
                else if constexpr (kTile > 1) {
                    if (left == 1) dequant_gemv_row_tile<kN, kK, 1>(a, xs, r0, n);
                    else if constexpr (kTile > 2) {
                        if (left == 2) dequant_gemv_row_tile<kN, kK, 2>(a, xs, r0, n);
                        else if constexpr (kTile > 3) dequant_gemv_row_tile<kN, kK, 3>(a, xs, r0, n);
                    }
                }
            }
        }
    };
    // Enough rows per chunk to amortise the hand-off, at least a few chunks per thread.
    constexpr i64 kGrain = static_cast<i64>(kN) * kK >= (1 << 22) ? 16 : 64;
    if (static_cast<i64>(kN) * kK * m < (1 << 16)) rows(0, kN);
    else parallel_for(ctx, kN, kGrain, rows);
}

}  // namespace kiln_host
