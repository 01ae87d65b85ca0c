// mla_decode and mla_prefill with tensor cores (config mma = 1): the contract of
// templates/common/mla_attention_params.h, the work split of templates/device/mla_attention.cuh (a CTA holds 32
// query rows = BT tokens x BH heads of one sequence and one context piece), bf16 mma.sync m16n8k16 with fp32
// accumulation for both products over 64-key tiles:
//   S = Q̃ Kᵀ   Q̃ [32 x CD] and the tile [64 x CD] in shared memory; warp (rg, sl) computes rows 16 rg .. + 16
//              against keys 16 sl .. + 16 (A and B fragments by ldmatrix)
//   softmax    fp32 in the log2 domain: row maxima over the four key slices through shared memory, the
//              weights P rounded to bf16 into shared memory [32 x 64]
//   O += P V   V = the first DC columns of the same tile (ldmatrix.trans); warp (rg, sl) owns rows 16 rg ..
//              and latent columns DC / 4 x sl .. (DC / 32 n8 tiles, 4 accumulators each)
// The tiles stream through a two-stage cp.async ring; shared rows are padded by 16 bytes (an odd number of
// 16-byte units per row: conflict-free ldmatrix).
#pragma once

#include <cuda_bf16.h>

#include "device/mla_attention.cuh"

namespace kiln_dev {
namespace mla {

constexpr int kMmaRows = 32;
constexpr int kMmaKeys = 64;

template <int DC, int DR>
__host__ __device__ constexpr unsigned attention_mma_smem() {
    constexpr int QS = DC + DR + 8, PS = kMmaKeys + 8;
    return static_cast<unsigned>(kMmaRows * QS * 2 + 2 * kMmaKeys * QS * 2 + kMmaRows * PS * 2 + 2 * 4 * kMmaRows * 4);
}

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const void* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], const void* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const u32*>(&v);
}

template <int DC, int DR, int BT, int BH>
__device__ __forceinline__ void attend_mma(const AttentionParams& p, int s, int t_first, int nt, int h0, int piece) {
    constexpr int CD = DC + DR, QS = CD + 8, PS = kMmaKeys + 8, CHUNKS = CD / 8;
    constexpr int WCOLS = DC / 4, NT = WCOLS / 8;  // latent columns and n8 tiles per warp
    static_assert(BT * BH == kMmaRows, "32 query rows per CTA");
    static_assert(DC % 64 == 0 && CD % 16 == 0, "d_c a multiple of 64, d_c + d_r of 16");
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);                   // [32][QS]
    __nv_bfloat16* ks = qs + kMmaRows * QS;                                        // [2][64][QS]
    __nv_bfloat16* ps = ks + 2 * kMmaKeys * QS;                                    // [32][PS]
    float* red_max = reinterpret_cast<float*>(ps + kMmaRows * PS);                 // [4][32]
    float* red_sum = red_max + 4 * kMmaRows;                                       // [4][32]

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rg = warp >> 2, sl = warp & 3, g = lane >> 2, t = lane & 3;
    const int first_pos = __ldg(p.idx.token_pos + t_first);
    const int lo = piece * p.split_keys;
    const int hi = min(lo + p.split_keys, first_pos + nt);
    if (lo >= hi) return;

    // The query rows (zero for rows past the block's tokens or the heads).
    for (int i = threadIdx.x; i < kMmaRows * CHUNKS; i += kAttnThreads) {
        const int r = i / CHUNKS, ch = i % CHUNKS, ti = r / BH, h = h0 + r % BH;
        const bool ok = ti < nt && h < p.heads;
        const __nv_bfloat16* src = ok ? p.q + (static_cast<long long>(t_first + ti) * p.heads + h) * CD + ch * 8 : p.q;
        cp_async16(qs + r * QS + ch * 8, src, ok);
    }
    cp_async_commit();
    const auto load_tile = [&](int k0, int stage) {
        __nv_bfloat16* dst = ks + stage * kMmaKeys * QS;
        for (int i = threadIdx.x; i < kMmaKeys * CHUNKS; i += kAttnThreads) {
            const int key = i / CHUNKS, ch = i % CHUNKS, j = k0 + key;
            const bool ok = j < hi;
            const char* src = ok ? cache_row(p.idx, p.layer_offset, CD * 2, s, j) + ch * 16
                                 : reinterpret_cast<const char*>(p.q);
            cp_async16(dst + key * QS + ch * 8, src, ok);
        }
        cp_async_commit();
    };

    const int r0 = rg * 16 + g, r1 = r0 + 8;
    const int pos0 = r0 / BH < nt ? first_pos + r0 / BH : -1;
    const int pos1 = r1 / BH < nt ? first_pos + r1 / BH : -1;
    const float qscale = p.scale * 1.4426950408889634f;
    float m0 = -1.0e30f, m1 = -1.0e30f, l0 = 0.f, l1 = 0.f;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    load_tile(lo, 0);
    int stage = 0;
    for (int k0 = lo; k0 < hi; k0 += kMmaKeys, stage ^= 1) {
        if (k0 + kMmaKeys < hi) {
            load_tile(k0 + kMmaKeys, stage ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16* kt = ks + stage * kMmaKeys * QS;

        // S for rows r0 / r1, keys 16 sl + 8 n + 2 t + {0, 1}.
        float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        const __nv_bfloat16* qa = qs + (rg * 16 + (lane & 15)) * QS + 8 * (lane >> 4);
        const __nv_bfloat16* kb = kt + (sl * 16 + (lane & 7) + 8 * (lane >> 4)) * QS + 8 * ((lane >> 3) & 1);
#pragma unroll 4
        for (int kk = 0; kk < CD / 16; ++kk) {
            u32 a[4], b[4];
            ldsm_x4(a, qa + kk * 16);
            ldsm_x4(b, kb + kk * 16);
            mma_bf16(sc[0], a, b[0], b[1]);
            mma_bf16(sc[1], a, b[2], b[3]);
        }
        // Mask, scale, the row maxima of this slice, then of all four.
        float mx0 = -1.0e30f, mx1 = -1.0e30f;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = k0 + sl * 16 + 8 * n + 2 * t + (e & 1);
                const bool vis = j < hi && j <= (e < 2 ? pos0 : pos1);
                sc[n][e] = vis ? sc[n][e] * qscale : -1.0e30f;
                if (e < 2) mx0 = fmaxf(mx0, sc[n][e]);
                else mx1 = fmaxf(mx1, sc[n][e]);
            }
#pragma unroll
        for (int d = 1; d <= 2; d <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
        }
        if (t == 0) {
            red_max[sl * kMmaRows + r0] = mx0;
            red_max[sl * kMmaRows + r1] = mx1;
        }
        __syncthreads();
        float mn0 = m0, mn1 = m1;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            mn0 = fmaxf(mn0, red_max[q * kMmaRows + r0]);
            mn1 = fmaxf(mn1, red_max[q * kMmaRows + r1]);
        }
        const float c0 = exp2f(m0 - mn0), c1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            float w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                w[e] = sc[n][e] > -1.0e29f ? exp2f(sc[n][e] - (e < 2 ? mn0 : mn1)) : 0.f;
                if (e < 2) l0 += w[e];
                else l1 += w[e];
            }
            const int col = sl * 16 + 8 * n + 2 * t;
            *reinterpret_cast<u32*>(ps + r0 * PS + col) = pack_bf16(w[0], w[1]);
            *reinterpret_cast<u32*>(ps + r1 * PS + col) = pack_bf16(w[2], w[3]);
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            acc[n][0] *= c0;
            acc[n][1] *= c0;
            acc[n][2] *= c1;
            acc[n][3] *= c1;
        }
        __syncthreads();

        // O += P V over the tile's 64 keys.
        const __nv_bfloat16* pa = ps + (rg * 16 + (lane & 15)) * PS + 8 * (lane >> 4);
        const __nv_bfloat16* vb = kt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * QS + sl * WCOLS + 8 * (lane >> 4);
#pragma unroll
        for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
            u32 a[4];
            ldsm_x4(a, pa + kk * 16);
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                u32 b[4];
                ldsm_x4_t(b, vb + kk * 16 * QS + n * 8);
                mma_bf16(acc[n], a, b[0], b[1]);
                mma_bf16(acc[n + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();  // the stage and P are refilled next
    }

    // The row sums: over the quad, then over the four slices.
#pragma unroll
    for (int d = 1; d <= 2; d <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, d);
        l1 += __shfl_xor_sync(0xffffffffu, l1, d);
    }
    if (t == 0) {
        red_sum[sl * kMmaRows + r0] = l0;
        red_sum[sl * kMmaRows + r1] = l1;
    }
    __syncthreads();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = half ? r1 : r0, pos = half ? pos1 : pos0, h = h0 + r % BH;
        if (pos < 0 || h >= p.heads) continue;
        const int pieces = (pos + p.split_keys) / p.split_keys;
        if (piece >= pieces) continue;
        const float l = red_sum[r] + red_sum[kMmaRows + r] + red_sum[2 * kMmaRows + r] + red_sum[3 * kMmaRows + r];
        const float inv = 1.0f / l;
        const long long row = static_cast<long long>(t_first + r / BH) * p.heads + h;
        const int c0 = sl * WCOLS + 2 * t;
        if (pieces == 1) {
            __nv_bfloat16* o = p.out + row * DC + c0;
#pragma unroll
            for (int n = 0; n < NT; ++n)
                *reinterpret_cast<u32*>(o + 8 * n) = pack_bf16(acc[n][2 * half] * inv, acc[n][2 * half + 1] * inv);
        } else {
            const long long pr = row * p.splits + piece;
            float* o = p.part_o + pr * DC + c0;
#pragma unroll
            for (int n = 0; n < NT; ++n)
                *reinterpret_cast<float2*>(o + 8 * n) = make_float2(acc[n][2 * half] * inv, acc[n][2 * half + 1] * inv);
            if (sl == 0 && t == 0) p.part_lse[pr] = ((half ? m1 : m0) + __log2f(l)) * 0.6931471805599453f;
        }
    }
}

template <int DC, int DR>
__global__ void __launch_bounds__(kAttnThreads) mla_decode_mma(const AttentionParams p) {
    constexpr int BH = kMmaRows;
    const int hbs = (p.heads + BH - 1) / BH;
    const int t = blockIdx.x / hbs, hb = blockIdx.x % hbs;
    if (t >= p.idx.num_tokens) return;
    const int s = __ldg(p.idx.token_seq + t);
    if (!serves(p.idx, p.only, s)) return;
    attend_mma<DC, DR, 1, BH>(p, s, t, 1, hb * BH, blockIdx.y);
}

template <int DC, int DR, int BT>
__global__ void __launch_bounds__(kAttnThreads) mla_prefill_mma(const AttentionParams p) {
    constexpr int BH = kMmaRows / BT;
    const int hbs = (p.heads + BH - 1) / BH;
    const int tbs = (p.idx.max_new_tokens + BT - 1) / BT;
    const int hb = blockIdx.x % hbs, tb = blockIdx.x / hbs % tbs, s = blockIdx.x / hbs / tbs;
    if (s >= p.idx.num_seqs || !serves(p.idx, p.only, s)) return;
    const int c0 = __ldg(p.idx.cu_seqlens + s), n = __ldg(p.idx.cu_seqlens + s + 1) - c0;
    if (tb * BT >= n) return;
    attend_mma<DC, DR, BT, BH>(p, s, c0 + tb * BT, min(BT, n - tb * BT), hb * BH, blockIdx.y);
}

}  // namespace mla
}  // namespace kiln_dev
