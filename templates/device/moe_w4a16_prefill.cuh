// moe_w4a16 prefill GEMM (indexed mode, sm_90): one CTA per (m-block, 128-row super-block) tile, so that
// every weight record is dequantised once per warp and reused across all routed rows of the m-block
// (64 or 128 rows), instead of once per 8-32 rows as in the decode kernels. Reads the decode_mma16
// layout: the prefill and decode configurations of the layer share one copy of the weights.
//
// Operands as in the decode kernels: dequantised weights are the m16n8k16 A operand (16 output rows),
// tokens the B operand (8 tokens per MMA, via ldmatrix from a padded shared-memory tile); accumulation
// in fp32. 256 threads = 8 warps. kRB = 2: warp w owns row-blocks 2 (w % 4) and 2 (w % 4) + 1 of the
// super-block and the token tiles i with i % 2 == w / 4 (interleaved, so both halves stay busy when
// the m-block is partly filled); kRB = 1: warp w owns row-block w and every token tile. Token tiles
// at or past the m-block's row count are skipped (the condition is warp-uniform); rows past the count
// inside a live tile are computed but never stored.
//
// Pipelines: two rings of K steps of kRecs 64-wide records (block_k 64 or 128; kRecs 2 needs
// k_pad % 128 == 0, the host picks 1 otherwise, as for the decode kernels). The weight ring has kStages
// slots of kRecs records each (weights and scales of all 8 row-blocks, the records of a super-block
// contiguous along K in the layout): one thread issues one bulk async copy per slot, completing on the
// slot's mbarrier (expect_tx). The token ring has kXStages slots of the gathered token rows (every
// thread copies its share with cp.async; 256 arrivals per slot); the weights get most of the shared
// memory. One CTA barrier per step guards the slots that are refilled; two records per step halve
// that fixed per-step work (waits, barrier, copy issue) per FLOP.
//
// With kRB = 2 it is slower than the decode kernels (a fixed per-step cost dominates: each weight word is
// dequantised by two warps, plus the per-step waits and barrier); with kRB = 1 and block_m 64 it beats
// them on prefill-sized batches and loses on decode, and two records per step (kRecs 2) cut the per-step
// cost further (docs/perf/moe_w4a16.md). The family generates kRB 1 with kRecs 2 where k_pad % 128 == 0,
// else 1 (jit/families/moe_w4a16_prefill.hpp); the layer picks it from the routed slots per expert
// (autotune/heuristics/moe_w4a16.hpp).
//
// Grid: one CTA per (m-block, super-block) for the host's m-block capacity, super-block fastest (the
// m-block's token tile is read from L2 by its neighbours, and an expert's m-blocks run close together
// so its weights are read from HBM about once); CTAs past the device-side m-block count exit at once.
//
// kMode 0 (gate_up): gate/up rows interleaved per 8 in the layout; the epilogue applies the GLU in fp32
//   and stores bf16 rows of the intermediate [rows, inter_stride], one row per sorted position.
// kMode 2 (down, rows): the epilogue stores the router-weighted bf16 row of every sorted position into
//   out [rows, out_stride]; moe_w4a16_combine sums each token's rows (deterministic, no atomics).
// Parameters: DecodeParams (moe_w4a16_decode.cuh); the schedule fields are not read.
#pragma once

#include "device/moe_w4a16_decode.cuh"

namespace kiln_dev {
namespace moe {

constexpr int kPrefillThreads = 256;

// Shared memory: [kXStages token tiles (8 * kTiles rows of 64 kRecs inputs, 128 kRecs + 16-byte rows) |
// kStages weight slots of kRecs records | mbarriers (tokens, then weights)].
template <int kFormat, int kTiles, int kRecs = 1>
struct PrefillSmem {
    using LB = LayoutBytes<kFormat, kDecodeBlocks>;
    static constexpr int kRec = LB::kRecordBytes;  // a multiple of 128
    static constexpr int kWSlot = kRecs * kRec;
    static constexpr int kXStride = 128 * kRecs + 16;  // inputs + 16 bytes: conflict-free ldmatrix
    static constexpr int kXTile = 8 * kTiles * kXStride;
    static constexpr int kXStages = kTiles == 8 && kRecs == 1 ? 4 : 3;
    static constexpr int kOffW = kXStages * kXTile;
};

// Per CTA at most 112 KB, so that two CTAs share an SM.
constexpr int kPrefillSmemLimit = 114688;

template <int kFormat, int kTiles, int kRecs = 1>
__host__ __device__ constexpr int prefill_smem_bytes(int stages) {
    using SM = PrefillSmem<kFormat, kTiles, kRecs>;
    return SM::kOffW + stages * SM::kWSlot + ((8 * (stages + SM::kXStages) + 127) / 128) * 128;
}
// Deepest weight ring (at most 24 slots) under the limit.
template <int kFormat, int kTiles, int kRecs = 1>
__host__ __device__ constexpr int prefill_default_stages() {
    int s = 24;
    while (s > 2 && prefill_smem_bytes<kFormat, kTiles, kRecs>(s) > kPrefillSmemLimit) --s;
    return s;
}

// Stores one 8-token tile of one 16-row block from its m16n8 accumulators c0..c3 (this lane: rows g and
// g + 8 of the block, tokens 2t and 2t + 1). Neighbouring lanes (g ^ 1) swap one value so that every lane
// stores two adjacent columns of one token (4-byte stores): even g keeps token 2t, odd g token 2t + 1.
// r: the tile row this lane stores (8 ti + 2t + odd), pos: its sorted row, rb: the row-block in the
// matrix, wt: its router weight (kMode 2). kMode 0: the GLU of (gate, up) = (row g, row g + 8) into the
// intermediate; with kWeightIn, times the router weights of tokens 2t and 2t + 1 (wt2) before the one
// rounding, so that down needs no weights; kMode 2: router-weighted bf16 rows of down.
template <int kMode, int kAct, bool kWeightIn = false>
__device__ __forceinline__ void prefill_store_tile(const DecodeParams& p, float c0, float c1, float c2, float c3, int g,
                                                   int r, long long pos, int rb, int valid, float wt,
                                                   float2 wt2 = make_float2(1.0f, 1.0f)) {
    const int odd = g & 1;
    if constexpr (kMode == 0) {
        float v0 = glu<kAct>(c0, c2);  // token 2t
        float v1 = glu<kAct>(c1, c3);  // token 2t + 1
        if constexpr (kWeightIn) {
            v0 *= wt2.x;
            v1 *= wt2.y;
        }
        const float other = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
        const int col = rb * 8 + g - odd;
        if (r < valid)
            *reinterpret_cast<u32*>(p.inter + pos * p.inter_stride + col) = odd ? pack_bf16x2(other, v1) : pack_bf16x2(v0, other);
    } else {
        const float c[4] = {c0, c1, c2, c3};
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // output rows g (c0, c1) and g + 8 (c2, c3)
            const float v0 = c[2 * half], v1 = c[2 * half + 1];
            const float other = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
            const int col = rb * 16 + 8 * half + g - odd;
            const float lo = odd ? other : v0, hi = odd ? v1 : other;
            if (r < valid && col < p.n_real)
                *reinterpret_cast<u32*>(p.out + pos * p.out_stride + col) = pack_bf16x2(wt * lo, wt * hi);
        }
    }
}

// kTiles: token tiles of 8 per m-block (8 or 16: block_m 64 or 128); kStages: weight ring slots.
// kRB: 16-row blocks per warp. 2 (the measured version): warp w owns row-blocks 2 (w % 4), +1 and the
// token tiles of parity w / 4, so each weight word is dequantised by two warps. 1: warp w owns row-block
// w and every token tile, so each word is dequantised once per CTA (half the dequantisation; every warp
// then loads every token tile). kRecs: 64-wide records per K step (1 or 2; 2 needs k_pad % 128 == 0).
template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kTiles, int kStages, int kRB = 2,
          int kRecs = 1>
__global__ void __launch_bounds__(kPrefillThreads, 2) moe_w4a16_prefill(const DecodeParams p) {
    static_assert(kTiles == 8 || kTiles == 16, "block_m 64 or 128");
    static_assert(kRB == 1 || kRB == 2, "one or two row-blocks per warp");
    static_assert(kRecs == 1 || kRecs == 2, "one or two records per step");
    static_assert(kStages >= 2, "at least two stages");
    static_assert(kMode == 0 || kMode == 2, "gate_up or down rows");
    using SM = PrefillSmem<kFormat, kTiles, kRecs>;
    using LB = typename SM::LB;
    constexpr int kBM = 8 * kTiles;
    constexpr int kTW = kRB == 2 ? kTiles / 2 : kTiles;  // token tiles per warp
    constexpr int kTStep = kRB;                          // token tile j of a warp is kTStep j + wm
    constexpr int kXS = SM::kXStages;
    constexpr int kRec = SM::kRec;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    constexpr int kWB = LB::kWeightBytes;
    constexpr int kWSlot = SM::kWSlot;
    constexpr int kCpr = 8 * kRecs;                      // 16-byte token chunks per row and stage
    constexpr int kRpp = kPrefillThreads / kCpr;         // rows per pass of the CTA (32 or 16)
    constexpr int kCpt = kBM * kCpr / kPrefillThreads;   // 16-byte token chunks per thread and stage

    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int wn = warp & 3;
    const int wm = kRB == 2 ? warp >> 2 : 0;    // first token tile
    const int rb0 = kRB == 2 ? 2 * wn : warp;  // first row-block of the super-block
    const int g = lane >> 2, t = lane & 3;

    const int nsb = p.n_pad >> 7;
    const int mb = static_cast<int>(blockIdx.x) / nsb;
    const int sb = static_cast<int>(blockIdx.x) - mb * nsb;
    if (mb >= *p.num_mblocks) return;
    const int nq = p.k_pad >> 6;  // records
    const int nst = nq / kRecs;   // K steps (the host guarantees nq % kRecs == 0)
    const int2 info = __ldg(p.mblock_info + mb);
    const int valid = info.y;
    const int ntiles = (valid + 7) >> 3;

    const u32 sbase = smem_addr(smem_raw);
    const u32 wbase = sbase + SM::kOffW;
    const u32 xbars = wbase + kStages * kWSlot;  // kXS token barriers, then kStages weight barriers
    const u32 wbars = xbars + 8 * kXS;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < kXS; ++s) mbar_init(xbars + 8 * s, kPrefillThreads);
        for (int s = 0; s < kStages; ++s) mbar_init(wbars + 8 * s, 1);
        fence_mbar_init();
    }

    // The token rows this thread copies: rows tid / kCpr + kRpp h, inputs 8 (tid % kCpr) .. + 7 of each
    // step. Source rows are kept as 32-bit row indices (-1: not copied) to spare registers.
    const int kc = tid % kCpr;
    int srow[kCpt];
#pragma unroll
    for (int h = 0; h < kCpt; ++h) {
        const int row = tid / kCpr + kRpp * h;
        srow[h] = -1;
        if (row < valid) srow[h] = kMode == 0 ? __ldg(p.sorted_token + mb * kBM + row) : mb * kBM + row;
    }
    const u8* wrec = p.weights + static_cast<u64>(info.x) * p.expert_stride + static_cast<u64>(sb) * nq * kRec;
    __syncthreads();  // mbarrier initialisation visible to every thread

    auto produce_x = [&](int q, int slot) {  // every thread
        const u32 st = sbase + slot * SM::kXTile;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            if (srow[h] >= 0) {
                int bytes = 16;
                if constexpr (kMaskK) bytes = max(0, min(16, (p.k_real - (q * 64 * kRecs + kc * 8)) * 2));
                const __nv_bfloat16* src = p.x + static_cast<long long>(srow[h]) * p.x_stride + q * 64 * kRecs + kc * 8;
                cp_async16(st + (tid / kCpr + kRpp * h) * SM::kXStride + kc * 16,
                           bytes ? static_cast<const void*>(src) : static_cast<const void*>(p.x), bytes);
            }
        }
        cp_async_mbar_arrive(xbars + 8 * slot);
    };
    auto produce_w = [&](int q, int slot) {  // thread 0 only; q: the K step
        const u32 bar = wbars + 8 * slot;
        mbar_arrive_expect_tx(bar, kWSlot);
        bulk_g2s(wbase + slot * kWSlot, wrec + static_cast<u64>(q) * kWSlot, kWSlot, bar);
    };

    float acc[kRB][kTW][4];
#pragma unroll
    for (int h = 0; h < kRB; ++h)
#pragma unroll
        for (int j = 0; j < kTW; ++j) acc[h][j][0] = acc[h][j][1] = acc[h][j][2] = acc[h][j][3] = 0.0f;

    const int lrow = lane & 7, lmat = lane >> 3;
    const u32 w_off = rb0 * 512 + lane * 16;
    const u32 s_off = kWB + rb0 * kScB + g * (kFormat == kFormatInt4 ? 8 : 4);
    const u32 x_off = (8 * wm + lrow) * SM::kXStride + lmat * 16;  // tile kTStep j + wm: + 8 kTStep j rows

    if (tid == 0) {
#pragma unroll 1
        for (int s = 0; s < kStages - 1 && s < nst; ++s) produce_w(s, s);
    }
#pragma unroll 1
    for (int s = 0; s < kXS - 1 && s < nst; ++s) produce_x(s, s);

    int ws = 0, xs = 0;     // slots consumed this step
    u32 wph = 0, xph = 0;   // their phases
    int wp = kStages - 1, xp = kXS - 1;  // slots refilled this step (consumed by the previous step)
#pragma unroll 1
    for (int i = 0; i < nst; ++i) {
        mbar_wait(wbars + 8 * ws, wph);
        mbar_wait(xbars + 8 * xs, xph);
        __syncthreads();  // every warp is done with the slots refilled below (consumed last step)
        // No proxy fence before the bulk copy: the slot's generic reads (last step) have delivered
        // their values before the barrier above, and a fence here would also wait for thread 0's own
        // cp.async token copies in flight (an L2 round trip per step for the whole CTA).
        if (tid == 0 && i + kStages - 1 < nst) produce_w(i + kStages - 1, wp);
        if (i + kXS - 1 < nst) produce_x(i + kXS - 1, xp);
#pragma unroll
        for (int r = 0; r < kRecs; ++r) {
            const u32 st = wbase + ws * kWSlot + r * kRec;
            const u32 stx = sbase + xs * SM::kXTile + r * 128;
            u32 words[kRB][4], m[kRB][4];
#pragma unroll
            for (int h = 0; h < kRB; ++h)
                load_block<kFormat, kWideScale>(st + w_off + h * 512, st + s_off + h * kScB, words[h], m[h]);
#pragma unroll
            for (int c = 0; c < 2; ++c) {  // k32 halves of the record
                u32 a[kRB][2][4];
#pragma unroll
                for (int h = 0; h < kRB; ++h)
#pragma unroll
                    for (int s2 = 0; s2 < 2; ++s2)
                        dequant_word<kFormat, kWideScale>(words[h][2 * c + s2], m[h][2 * c], m[h][2 * c + 1], a[h][s2]);
#pragma unroll
                for (int j = 0; j < kTW; ++j) {
                    if (kTStep * j + wm < ntiles) {
                        u32 b0, b1, b2, b3;
                        ldmatrix_x4(stx + x_off + j * (8 * kTStep * SM::kXStride) + c * 64, b0, b1, b2, b3);
#pragma unroll
                        for (int h = 0; h < kRB; ++h) {
                            mma_bf16_16816(acc[h][j], a[h][0][0], a[h][0][1], a[h][0][2], a[h][0][3], b0, b1);
                            mma_bf16_16816(acc[h][j], a[h][1][0], a[h][1][1], a[h][1][2], a[h][1][3], b2, b3);
                        }
                    }
                }
            }
        }
        ring_advance(ws, wph, kStages);
        ring_advance(xs, xph, kXS);
        wp = ring_next(wp, kStages);
        xp = ring_next(xp, kXS);
    }

    // Epilogue: each live token tile of each row-block (prefill_store_tile).
    const int odd = g & 1;
#pragma unroll
    for (int j = 0; j < kTW; ++j) {
        const int ti = kTStep * j + wm;
        if (ti >= ntiles) continue;
        const int r = 8 * ti + 2 * t + odd;  // the token row this lane stores
        const long long pos = static_cast<long long>(mb) * kBM + r;
        const float wt = kMode == 2 && r < valid ? __ldg(p.sorted_weight + pos) : 0.0f;
#pragma unroll
        for (int h = 0; h < kRB; ++h)
            prefill_store_tile<kMode, kAct>(p, acc[h][j][0], acc[h][j][1], acc[h][j][2], acc[h][j][3], g, r, pos,
                                            8 * sb + rb0 + h, valid, wt);
    }
}

}  // namespace moe
}  // namespace kiln_dev
