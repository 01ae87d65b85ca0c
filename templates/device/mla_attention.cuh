// mla_decode and mla_prefill: absorbed MLA attention over the paged latent cache (templates/common/
// mla_attention_params.h), CUDA-core fp32 arithmetic on bf16 data.
//
// A CTA holds ROWS = BT tokens x BH heads query rows of one sequence and one context piece; 8 warps of
// ROWS / 8 rows each. Key tiles of 32 rows (d_c + d_r bf16 each) stream through a two-stage cp.async ring
// in shared memory, read once per CTA for all its rows (the heads of MLA share one latent: MQA). Per tile,
// lane = key: each lane scores its key against the warp's rows (queries in shared memory as fp32, scaled by
// scale x log2 e, read as broadcasts; key rows padded to a 16-byte stride of 4 mod 32 words, so 16-byte loads
// are conflict-free), the online softmax runs in the log2 domain, and the value pass broadcasts each key's
// weight by shuffle while lane l accumulates latent columns 2l + 64i (i < d_c / 64) of every row.
//   mla_decode<DC, DR, BH>       BT = 1, one CTA per (token, head block, piece)
//   mla_prefill<DC, DR, BT, BH>  one CTA per (sequence, block of BT of its new tokens, head block, piece):
//                                a chunk's tokens share every key tile (causal: row i sees keys <= its position)
// Grid: x = work item x head blocks (head block fastest, so the CTAs reading one sequence's tiles run
// together), y = pieces.
#pragma once

#include <cuda_bf16.h>

#include "device/mla_common.cuh"
#include "common/mla_attention_params.h"

namespace kiln_dev {
namespace mla {

using kiln_params::mla::AttentionParams;

constexpr int kAttnThreads = 256;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kKeyTile = 32;

// Key rows in shared memory: CD values padded by 8 (16 bytes), CD a multiple of 8, so the stride in words is
// CD / 2 + 4: 4 mod 32 (conflict-free 16-byte loads) when d_c + d_r is a multiple of 64, as in K3 (576).
template <int CD>
__host__ __device__ constexpr int key_stride() { return CD + 8; }

template <int DC, int DR, int ROWS>
__host__ __device__ constexpr unsigned attention_smem() {
    return static_cast<unsigned>(ROWS * (DC + DR) * 4 + 2 * kKeyTile * key_stride<DC + DR>() * 2);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// One CTA's work: tokens [t_first, t_first + nt) of sequence s (consecutive positions), heads [h0, h0 + BH).
template <int DC, int DR, int BT, int BH>
__device__ __forceinline__ void attend(const AttentionParams& p, int s, int t_first, int nt, int h0, int piece) {
    constexpr int CD = DC + DR, ROWS = BT * BH, RPW = ROWS / kAttnWarps, KS = key_stride<CD>();
    constexpr int COLS = DC / 64;  // bf16 pairs per lane and row
    constexpr int CHUNKS = CD / 8;
    static_assert(ROWS % kAttnWarps == 0 && RPW >= 1 && RPW <= 4, "1 to 4 rows per warp");
    static_assert(DC % 64 == 0 && DR % 8 == 0, "d_c a multiple of 64, d_r of 8");
    extern __shared__ __align__(16) unsigned char smem[];
    float* qs = reinterpret_cast<float*>(smem);                                     // [ROWS][CD]
    __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + ROWS * CD * 4);      // [2][kKeyTile][KS]

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int first_pos = __ldg(p.idx.token_pos + t_first);
    const int max_pos = first_pos + nt - 1;
    const int lo = piece * p.split_keys;
    const int hi = min(lo + p.split_keys, max_pos + 1);
    if (lo >= hi) return;  // no row of this CTA has this piece

    const float qscale = p.scale * 1.4426950408889634f;  // scores in the log2 domain
    for (int i = threadIdx.x; i < ROWS * CD; i += kAttnThreads) {
        const int r = i / CD, c = i % CD, ti = r / BH, h = h0 + r % BH;
        float v = 0.f;
        if (ti < nt && h < p.heads)
            v = __bfloat162float(p.q[(static_cast<long long>(t_first + ti) * p.heads + h) * CD + c]) * qscale;
        qs[i] = v;
    }

    const auto load_tile = [&](int k0, int stage) {
        __nv_bfloat16* dst = ks + stage * kKeyTile * KS;
        for (int i = threadIdx.x; i < kKeyTile * CHUNKS; i += kAttnThreads) {
            const int key = i / CHUNKS, ch = i % CHUNKS, j = k0 + key;
            const bool ok = j < hi;
            const char* src = ok ? cache_row(p.idx, p.layer_offset, CD * 2, s, j) + ch * 16
                                 : reinterpret_cast<const char*>(p.q);
            cp_async16(dst + key * KS + ch * 8, src, ok);
        }
        cp_async_commit();
    };

    float m[RPW], lsum[RPW], acc[RPW][2 * COLS];
    int rpos[RPW];
#pragma unroll
    for (int k = 0; k < RPW; ++k) {
        m[k] = -1.0e30f;
        lsum[k] = 0.f;
        const int r = warp * RPW + k;
        rpos[k] = r / BH < nt ? first_pos + r / BH : -1;  // -1: no such row (no key is visible)
#pragma unroll
        for (int c = 0; c < 2 * COLS; ++c) acc[k][c] = 0.f;
    }

    load_tile(lo, 0);
    int stage = 0;
    for (int k0 = lo; k0 < hi; k0 += kKeyTile, stage ^= 1) {
        if (k0 + kKeyTile < hi) {
            load_tile(k0 + kKeyTile, stage ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16* kt = ks + stage * kKeyTile * KS;

        // Scores: lane = key.
        float sc[RPW];
#pragma unroll
        for (int k = 0; k < RPW; ++k) sc[k] = 0.f;
        const __nv_bfloat16* krow = kt + lane * KS;
#pragma unroll 4
        for (int c = 0; c < CD; c += 8) {
            const uint4 kv = *reinterpret_cast<const uint4*>(krow + c);
            const u32 w[4] = {kv.x, kv.y, kv.z, kv.w};
            float kf[8];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[u]));
                kf[2 * u] = f.x;
                kf[2 * u + 1] = f.y;
            }
#pragma unroll
            for (int k = 0; k < RPW; ++k) {
                const float4 a = *reinterpret_cast<const float4*>(qs + (warp * RPW + k) * CD + c);
                const float4 b = *reinterpret_cast<const float4*>(qs + (warp * RPW + k) * CD + c + 4);
                sc[k] += a.x * kf[0] + a.y * kf[1] + a.z * kf[2] + a.w * kf[3] + b.x * kf[4] + b.y * kf[5] +
                         b.z * kf[6] + b.w * kf[7];
            }
        }
        // Online softmax (log2 domain); masked keys weigh exactly 0.
        const int j = k0 + lane;
        float pw[RPW];
#pragma unroll
        for (int k = 0; k < RPW; ++k) {
            const bool vis = j < hi && j <= rpos[k];
            float mx = vis ? sc[k] : -1.0e30f;
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
            const float mn = fmaxf(m[k], mx);
            const float corr = exp2f(m[k] - mn);
            pw[k] = vis ? exp2f(sc[k] - mn) : 0.f;
            lsum[k] = lsum[k] * corr + pw[k];
            m[k] = mn;
#pragma unroll
            for (int c = 0; c < 2 * COLS; ++c) acc[k][c] *= corr;
        }
        // Values: the latent part of each key row.
        const int kn = min(kKeyTile, hi - k0);
        for (int key = 0; key < kn; ++key) {
            const __nv_bfloat16* vrow = kt + key * KS + 2 * lane;
            float pk[RPW];
#pragma unroll
            for (int k = 0; k < RPW; ++k) pk[k] = __shfl_sync(0xffffffffu, pw[k], key);
#pragma unroll
            for (int i = 0; i < COLS; ++i) {
                const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vrow + 64 * i));
#pragma unroll
                for (int k = 0; k < RPW; ++k) {
                    acc[k][2 * i] += pk[k] * v.x;
                    acc[k][2 * i + 1] += pk[k] * v.y;
                }
            }
        }
        __syncthreads();  // the stage is refilled by the next iteration's prefetch
    }

#pragma unroll
    for (int k = 0; k < RPW; ++k) {
        float l = lsum[k];
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) l += __shfl_xor_sync(0xffffffffu, l, d);
        const int r = warp * RPW + k, h = h0 + r % BH;
        if (rpos[k] < 0 || h >= p.heads) continue;
        const int pieces = (rpos[k] + p.split_keys) / p.split_keys;
        if (piece >= pieces) continue;
        const long long row = static_cast<long long>(t_first + r / BH) * p.heads + h;
        const float inv = 1.0f / l;
        if (pieces == 1) {
            __nv_bfloat16* o = p.out + row * DC + 2 * lane;
#pragma unroll
            for (int i = 0; i < COLS; ++i)
                *reinterpret_cast<__nv_bfloat162*>(o + 64 * i) =
                    __floats2bfloat162_rn(acc[k][2 * i] * inv, acc[k][2 * i + 1] * inv);
        } else {
            const long long pr = row * p.splits + piece;
            float* o = p.part_o + pr * DC + 2 * lane;
#pragma unroll
            for (int i = 0; i < COLS; ++i)
                *reinterpret_cast<float2*>(o + 64 * i) = make_float2(acc[k][2 * i] * inv, acc[k][2 * i + 1] * inv);
            if (lane == 0) p.part_lse[pr] = (m[k] + __log2f(l)) * 0.6931471805599453f;
        }
    }
}

template <int DC, int DR, int BH>
__global__ void __launch_bounds__(kAttnThreads) mla_decode(const AttentionParams p) {
    const int hbs = (p.heads + BH - 1) / BH;
    const int t = blockIdx.x / hbs, hb = blockIdx.x % hbs;
    if (t >= p.idx.num_tokens) return;
    const int s = __ldg(p.idx.token_seq + t);
    if (!serves(p.idx, p.only, s)) return;
    attend<DC, DR, 1, BH>(p, s, t, 1, hb * BH, blockIdx.y);
}

template <int DC, int DR, int BT, int BH>
__global__ void __launch_bounds__(kAttnThreads) mla_prefill(const AttentionParams p) {
    const int hbs = (p.heads + BH - 1) / BH;
    const int tbs = (p.idx.max_new_tokens + BT - 1) / BT;
    const int hb = blockIdx.x % hbs, tb = blockIdx.x / hbs % tbs, s = blockIdx.x / hbs / tbs;
    if (s >= p.idx.num_seqs || !serves(p.idx, p.only, s)) return;
    const int c0 = __ldg(p.idx.cu_seqlens + s), n = __ldg(p.idx.cu_seqlens + s + 1) - c0;
    if (tb * BT >= n) return;
    attend<DC, DR, BT, BH>(p, s, c0 + tb * BT, min(BT, n - tb * BT), hb * BH, blockIdx.y);
}

}  // namespace mla
}  // namespace kiln_dev
