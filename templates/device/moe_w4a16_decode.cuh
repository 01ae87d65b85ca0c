// moe_w4a16 decode GEMM (indexed mode, sm_90): swapped operands, dequantised weights on MMA-M and
// tokens on MMA-N (mma.sync m16n8k16), m-blocks of 8 * kTiles routed rows.
//
// One persistent CTA per SM, 512 threads = 4 groups x 4 warps. The work is the list of 16-row
// row-blocks over all m-blocks (num_mblocks * N_pad / 16, read from device memory); each CTA takes
// an equal contiguous share, so every SM streams the same number of weight bytes. Inside a CTA the
// share is cut into items of 64 rows (one layout super-block of one m-block); the four groups take
// items round-robin and each warp owns one 16-row block of an item over the whole K. A group runs
// its items as one flat sequence of K stages (64 or 128 inputs) through a kStages-deep pipeline of
// bulk async copies completing on mbarriers: one thread of the group issues, per stage, one copy of the
// item's weight records (scales included, contiguous in the layout), the group's threads copy the
// gathered token rows with cp.async (tracked by the same mbarrier), and the four warps share the tile
// through ldmatrix. Rows past the m-block's count are not copied (their MMA columns are never
// stored), and token tiles after the first are skipped when the m-block has fewer rows
// (semi-static tiling).
//
// kMode 0 (gate_up): weights are the gate/up rows interleaved per 8 (layout built with
//   gate_up = true), the epilogue applies the GLU in fp32 and stores bf16 rows of the intermediate
//   [rows, inter_stride], one row per sorted position.
// kMode 1 (down): x is that intermediate; the epilogue multiplies by the router weight and adds into
//   the fp32 accumulator acc [M, acc_stride] (zero between calls). The last warp to finish a 16-column
//   slice (per-slice counters) writes the bf16 output for all tokens, zeroes the slice of acc and
//   resets its counter, so a call leaves acc and the counters as it found them.
#pragma once

#include "moe_w4a16_common.cuh"

namespace kiln_dev {
namespace moe {

struct DecodeParams {
    const u8* weights;      // record base of expert 0
    u64 expert_stride;      // bytes per expert
    const __nv_bfloat16* x; // gate_up: activations [M, x_stride]; down: intermediate [rows, x_stride]
    i32 x_stride;           // elements
    i32 k_real;             // gate_up with kMaskK: columns of x that exist
    i32 k_pad;              // inputs of the weight matrix in the layout (multiple of 64)
    i32 n_pad;              // rows of the weight matrix in the layout (multiple of 64)
    i32 n_real;             // down: output columns
    const i32* num_mblocks;
    const int2* mblock_info;
    const i32* sorted_token;
    const float* sorted_weight;
    i32 num_tokens;
    __nv_bfloat16* inter;   // gate_up output
    i32 inter_stride;
    float* acc;             // down: fp32 accumulator [M, acc_stride]
    i32 acc_stride;
    __nv_bfloat16* out;     // down: bf16 output [M, out_stride]
    i32 out_stride;
    i32* counters;          // down: [n_pad / 16], zero between calls
};

constexpr int kDecodeThreads = 512;

// Shared memory of one group: kStages stages of [records | token tile | meta], then kStages mbarriers.
template <int kFormat, int kTiles, int kRecs>
struct DecodeSmem {
    static constexpr int kRec = LayoutBytes<kFormat>::kRecordBytes;
    static constexpr int kXStride = 128 * kRecs + 16;  // token row in smem (+16: conflict-free ldmatrix)
    static constexpr int kOffX = kRecs * kRec;
    static constexpr int kOffMeta = kOffX + 8 * kTiles * kXStride;
    static constexpr int kStage = ((kOffMeta + 16) + 127) / 128 * 128;
};

template <int kFormat, int kTiles, int kStages, int kRecs>
__host__ __device__ constexpr int decode_group_smem() {
    return kStages * DecodeSmem<kFormat, kTiles, kRecs>::kStage + ((8 * kStages + 127) / 128) * 128;
}
template <int kFormat, int kTiles, int kStages, int kRecs>
__host__ __device__ constexpr int decode_smem_bytes() {
    return 4 * decode_group_smem<kFormat, kTiles, kStages, kRecs>();
}

// kRecs: 64-wide K records per pipeline stage (the host picks 2 when K_pad % 128 == 0, else 1).
// kSkipMath: measurement variant that streams the same bytes and skips dequantisation and MMAs.
template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kTiles, int kStages, int kRecs,
          bool kSkipMath = false>
__global__ void __launch_bounds__(kDecodeThreads, 1) moe_w4a16_decode(const DecodeParams p) {
    static_assert(kTiles >= 1 && kTiles <= 4, "1..4 token tiles of 8");
    static_assert(kStages >= 2, "at least two stages");
    static_assert(kRecs == 1 || kRecs == 2, "one or two records per stage");
    using SM = DecodeSmem<kFormat, kTiles, kRecs>;
    constexpr int kBM = 8 * kTiles;
    constexpr int kRec = SM::kRec;
    constexpr int kScB = LayoutBytes<kFormat>::kScaleBytesPerBlock;
    constexpr int kChunks = 64 * kRecs * kTiles;  // 16-byte token chunks per stage
    constexpr int kCpt = (kChunks + 127) / 128;    // per thread

    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int gid = warp >> 2, wig = warp & 3, tg = tid & 127;
    const int g = lane >> 2, t = lane & 3;

    const int nq = p.k_pad >> 6;
    const int nst = nq / kRecs;  // stages per item
    const int nmb = *p.num_mblocks;
    if (nmb == 0) {
        if constexpr (kMode == 1) {
            const int total = p.num_tokens * p.n_real;
            for (int i = blockIdx.x * kDecodeThreads + tid; i < total; i += gridDim.x * kDecodeThreads)
                p.out[(i / p.n_real) * p.out_stride + i % p.n_real] = __float2bfloat16(0.0f);
        }
        return;
    }
    const int nb16 = p.n_pad >> 4, nb64 = p.n_pad >> 6;
    const long long units = static_cast<long long>(nmb) * nb16;
    const int r0 = static_cast<int>(units * blockIdx.x / gridDim.x);
    const int r1 = static_cast<int>(units * (blockIdx.x + 1) / gridDim.x);
    if (r0 >= r1) return;
    const int gs0 = r0 >> 2;              // super-block items: row-block r belongs to item r / 4
    const int n_items = ((r1 - 1) >> 2) + 1 - gs0;
    const int my_items = n_items > gid ? (n_items - gid + 3) / 4 : 0;
    const int steps = my_items * nst;
    if (steps == 0) return;

    const u32 gsm = smem_addr(smem_raw) + gid * decode_group_smem<kFormat, kTiles, kStages, kRecs>();
    const u32 bars = gsm + kStages * SM::kStage;
    // One warp per group issues the weight copies; a different one in each group, so the four
    // producers sit on four different schedulers.
    const bool producer = wig == gid && lane == 0;
    if (tid == 128 * gid) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) mbar_init(bars + 8 * s, 129);  // 128 cp.async arrivals + 1 for the weights
        fence_mbar_init();
    }
    named_barrier(1 + gid, 128);

    // ---- producer state: the item whose stages are being issued, and the next one ----
    struct Item {
        int mb, sb, mask, expert, valid;
        int tok[kCpt];
    };
    auto make_item = [&](int j) {
        Item it;
        const int G = gs0 + gid + 4 * j;
        it.mb = G / nb64;
        it.sb = G - it.mb * nb64;
        const int rbase = 4 * G;
        it.mask = 0;
#pragma unroll
        for (int w = 0; w < 4; ++w)
            if (rbase + w >= r0 && rbase + w < r1) it.mask |= 1 << w;
        const int2 info = __ldg(p.mblock_info + it.mb);
        it.expert = info.x;
        it.valid = info.y;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            it.tok[h] = -1;
            if constexpr (kMode == 0) {
                const int row = (tg + 128 * h) / (8 * kRecs);
                if (row < kBM) it.tok[h] = __ldg(p.sorted_token + it.mb * kBM + row);
            }
        }
        return it;
    };
    const u64 policy = evict_first_policy();
    Item cur = make_item(0);
    Item nxt = cur;
    if (my_items > 1) nxt = make_item(1);
    int pj = 0, pq = 0;

    auto produce = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        const u32 bar = bars + 8 * slot;
        const int q0 = pq * kRecs;
        const int ntiles = (cur.valid + 7) >> 3;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            const int c = tg + 128 * h;
            const int row = c / (8 * kRecs), kc = c % (8 * kRecs);
            if (c < kChunks && (row >> 3) < ntiles && row < cur.valid) {
                const int k = q0 * 64 + kc * 8;
                int bytes = 16;
                if constexpr (kMaskK) bytes = max(0, min(16, (p.k_real - k) * 2));
                const __nv_bfloat16* src;
                if constexpr (kMode == 0)
                    src = p.x + static_cast<long long>(cur.tok[h]) * p.x_stride + k;
                else
                    src = p.x + static_cast<long long>(cur.mb * kBM + row) * p.x_stride + k;
                cp_async16(st + SM::kOffX + row * SM::kXStride + kc * 16, bytes ? src : p.x, bytes);
            }
        }
        cp_async_mbar_arrive(bar);
        if (producer) {
            const int m = cur.mask;
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta), "r"(cur.mb),
                         "r"(cur.valid), "r"(m), "r"(0)
                         : "memory");
            const u8* rec = p.weights + static_cast<u64>(cur.expert) * p.expert_stride +
                            static_cast<u64>(cur.sb * nq + q0) * kRec;
            if (m == 0xF) {
                mbar_arrive_expect_tx(bar, kRecs * kRec);
                bulk_g2s_hint(st, rec, kRecs * kRec, bar, policy);
            } else {
                const int w0 = __ffs(m) - 1, w1 = 32 - __clz(m);
                mbar_arrive_expect_tx(bar, kRecs * (w1 - w0) * (512 + kScB));
#pragma unroll
                for (int j = 0; j < kRecs; ++j) {
                    bulk_g2s_hint(st + j * kRec + w0 * 512, rec + j * kRec + w0 * 512, (w1 - w0) * 512, bar, policy);
                    bulk_g2s_hint(st + j * kRec + 2048 + w0 * kScB, rec + j * kRec + 2048 + w0 * kScB, (w1 - w0) * kScB,
                                  bar, policy);
                }
            }
        }
        if (++pq == nst) {
            pq = 0;
            ++pj;
            cur = nxt;
            if (pj + 1 < my_items) nxt = make_item(pj + 1);
        }
    };

    // ---- consumer state ----
    float acc[kTiles][4];
    int c_mb = 0, c_valid = 0, c_ntiles = 0, c_sb = 0;
    bool c_active = false;
    int c_q = 0, c_j = 0;
    int e_tok[kTiles][2];
    float e_wt[kTiles][2];
    const int lrow = lane & 7, lmat = lane >> 3;

    auto consume = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        if (c_q == 0) {
            const uint4 meta = lds128(st + SM::kOffMeta);
            c_mb = static_cast<int>(meta.x);
            c_valid = static_cast<int>(meta.y);
            c_active = (meta.z >> wig) & 1u;
            c_ntiles = (c_valid + 7) >> 3;
            c_sb = (gs0 + gid + 4 * c_j) - c_mb * nb64;
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
                if constexpr (kMode == 1) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int pos = c_mb * kBM + 8 * i + 2 * t + e;
                        e_tok[i][e] = __ldg(p.sorted_token + pos);
                        e_wt[i][e] = __ldg(p.sorted_weight + pos);
                    }
                }
            }
        }
        if (c_active && !kSkipMath) {
#pragma unroll
            for (int j = 0; j < kRecs; ++j) {
                const u32 rec = st + j * kRec;
                const uint4 wv = lds128(rec + wig * 512 + lane * 16);
                uint2 sv;
                if constexpr (kFormat == kFormatInt4) {
                    sv = lds64(rec + 2048 + wig * kScB + g * 8);
                } else {
                    sv.x = lds32(rec + 2048 + wig * kScB + g * 4);
                    sv.y = 0;
                }
                u32 m[4];
                expand_scales<kFormat, kWideScale>(sv, m);
                u32 b[kTiles][8];
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
                    if (i == 0 || i < c_ntiles) {
                        const u32 xrow = st + SM::kOffX + (8 * i + lrow) * SM::kXStride + j * 128;
#pragma unroll
                        for (int c = 0; c < 2; ++c)
                            ldmatrix_x4(xrow + (4 * c + lmat) * 16, b[i][4 * c + 0], b[i][4 * c + 1], b[i][4 * c + 2],
                                        b[i][4 * c + 3]);
                    }
                }
                const u32 words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    u32 a[4];
                    dequant_word<kFormat, kWideScale>(words[s], m[(s >> 1) * 2], m[(s >> 1) * 2 + 1], a);
#pragma unroll
                    for (int i = 0; i < kTiles; ++i) {
                        if (i == 0 || i < c_ntiles)
                            mma_bf16_16816(acc[i], a[0], a[1], a[2], a[3], b[i][2 * s], b[i][2 * s + 1]);
                    }
                }
            }
        }
        if (c_q == nst - 1 && c_active) {
            const int rb = 4 * c_sb + wig;
            if constexpr (kMode == 0) {
                const int col = rb * 8 + g;
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = 8 * i + 2 * t + e;
                        if (r < c_valid) {
                            const float h = glu<kAct>(acc[i][e], acc[i][2 + e]);
                            p.inter[static_cast<long long>(c_mb * kBM + r) * p.inter_stride + col] = __float2bfloat16(h);
                        }
                    }
                }
            } else {
                const int n0 = rb * 16 + g;
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = 8 * i + 2 * t + e;
                        if (r < c_valid) {
                            float* dst = p.acc + static_cast<long long>(e_tok[i][e]) * p.acc_stride;
                            const float wt = e_wt[i][e];
                            if (n0 < p.n_real) red_add_f32(dst + n0, wt * acc[i][e]);
                            if (n0 + 8 < p.n_real) red_add_f32(dst + n0 + 8, wt * acc[i][2 + e]);
                        }
                    }
                }
                // Last of the num_mblocks contributions to this 16-column slice converts it.
                __threadfence();
                __syncwarp();
                int prev = 0;
                if (lane == 0) prev = atomicAdd(p.counters + rb, 1);
                prev = __shfl_sync(0xffffffffu, prev, 0);
                if (prev == nmb - 1) {
                    __threadfence();
                    const int c0 = rb * 16;
                    for (int mtok = lane; mtok < p.num_tokens; mtok += 32) {
                        float* arow = p.acc + static_cast<long long>(mtok) * p.acc_stride + c0;
                        __nv_bfloat16* orow = p.out + static_cast<long long>(mtok) * p.out_stride + c0;
                        float v[16];
#pragma unroll
                        for (int q4 = 0; q4 < 4; ++q4) {
                            const float4 f = ldcg_f4(arow + 4 * q4);
                            v[4 * q4 + 0] = f.x;
                            v[4 * q4 + 1] = f.y;
                            v[4 * q4 + 2] = f.z;
                            v[4 * q4 + 3] = f.w;
                        }
#pragma unroll
                        for (int q4 = 0; q4 < 4; ++q4)
                            reinterpret_cast<float4*>(arow)[q4] = make_float4(0.f, 0.f, 0.f, 0.f);
                        if (c0 + 16 <= p.n_real) {
                            uint4 o0, o1;
                            o0.x = pack_bf16x2(v[0], v[1]);
                            o0.y = pack_bf16x2(v[2], v[3]);
                            o0.z = pack_bf16x2(v[4], v[5]);
                            o0.w = pack_bf16x2(v[6], v[7]);
                            o1.x = pack_bf16x2(v[8], v[9]);
                            o1.y = pack_bf16x2(v[10], v[11]);
                            o1.z = pack_bf16x2(v[12], v[13]);
                            o1.w = pack_bf16x2(v[14], v[15]);
                            reinterpret_cast<uint4*>(orow)[0] = o0;
                            reinterpret_cast<uint4*>(orow)[1] = o1;
                        } else {
#pragma unroll
                            for (int c = 0; c < 16; ++c)
                                if (c0 + c < p.n_real) orow[c] = __float2bfloat16(v[c]);
                        }
                    }
                    if (lane == 0) p.counters[rb] = 0;
                }
            }
        }
        if (++c_q == nst) {
            c_q = 0;
            ++c_j;
        }
    };

    // ---- pipeline: stage i lives in slot i % kStages; its mbarrier phase is (i / kStages) & 1 ----
#pragma unroll 1
    for (int s = 0; s < kStages - 1; ++s)
        if (s < steps) produce(s);
    int slot_c = 0, slot_p = kStages - 1;
    u32 phase = 0;
#pragma unroll 1
    for (int i = 0; i < steps; ++i) {
        mbar_wait(bars + 8 * slot_c, phase);
        named_barrier(1 + gid, 128);  // every warp is done with the slot refilled below
        if (i + kStages - 1 < steps) {
            if (producer) fence_proxy_async();
            produce(slot_p);
        }
        consume(slot_c);
        if (++slot_c == kStages) {
            slot_c = 0;
            phase ^= 1u;
        }
        slot_p = slot_p + 1 == kStages ? 0 : slot_p + 1;
    }
}

}  // namespace moe
}  // namespace kiln_dev
