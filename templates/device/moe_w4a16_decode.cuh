// moe_w4a16 decode GEMM (indexed mode, sm_90): swapped operands, dequantised weights on MMA-M and
// tokens on MMA-N (mma.sync m16n8k16), m-blocks of 8 * kTiles routed rows. Reads the decode_mma16
// layout (128-row super-blocks).
//
// One persistent CTA per SM, 512 threads = 4 groups x 4 warps. The work is the list of 16-row
// row-blocks over all m-blocks (num_mblocks * N_pad / 16, read from device memory); each CTA takes
// an equal contiguous share, so every SM streams the same number of weight bytes. Inside a CTA the
// share is cut into items of 128 rows (one layout super-block of one m-block); the four groups take
// items round-robin and each warp owns two 16-row blocks of an item over the whole K (the token
// fragments it loads feed both). A group runs its items as one flat sequence of K stages (64 or 128
// inputs) through a kStages-deep pipeline: per stage one thread issues one bulk async copy of the
// item's weight records (scales included, contiguous in the layout) and the group's threads copy the
// gathered token rows with cp.async, all completing on the stage's mbarrier; the warps share the
// token tile through ldmatrix. Rows past the m-block's count are not copied (their MMA columns are
// never stored), and token tiles after the first are skipped when the m-block has fewer rows
// (semi-static tiling).
//
// kMode 0 (gate_up): weights are the gate/up rows interleaved per 8 (layout built with
//   gate_up = true), the epilogue applies the GLU in fp32 and stores bf16 rows of the intermediate
//   [rows, inter_stride], one row per sorted position.
// kMode 1 (down): x is that intermediate; the epilogue multiplies by the router weight and adds into
//   the fp32 accumulator acc [M, acc_stride] (zero between calls). Each 16-column slice has a counter;
//   the warp whose increment completes a slice (num_mblocks contributions) writes the bf16 output of
//   that slice for all tokens, zeroes the slice of acc and resets its counter, so a call leaves acc
//   and the counters as it found them. A warp increments one item late, so the fence behind its
//   atomic adds never stalls the pipeline.
#pragma once

#include "device/moe_w4a16_common.cuh"

namespace kiln_dev {
namespace moe {

struct DecodeParams {
    const u8* weights;      // record base of expert 0
    u64 expert_stride;      // bytes per expert
    const __nv_bfloat16* x; // gate_up: activations [M, x_stride]; down: intermediate [rows, x_stride]
    i32 x_stride;           // elements
    i32 k_real;             // gate_up with kMaskK: columns of x that exist
    i32 k_pad;              // inputs of the weight matrix in the layout (multiple of 64)
    i32 n_pad;              // rows of the weight matrix in the layout (multiple of 128)
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
constexpr int kDecodeBlocks = 8;  // row-blocks per super-block (decode_mma16)

// Shared memory of one group: kStages stages of [records | token tile | meta], then kStages mbarriers.
template <int kFormat, int kTiles, int kRecs>
struct DecodeSmem {
    using LB = LayoutBytes<kFormat, kDecodeBlocks>;
    static constexpr int kRec = LB::kRecordBytes;
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

__device__ __forceinline__ void decode_convert_slice(const DecodeParams& p, int rb, int lane) {
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
        for (int q4 = 0; q4 < 4; ++q4) reinterpret_cast<float4*>(arow)[q4] = make_float4(0.f, 0.f, 0.f, 0.f);
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
    using LB = typename SM::LB;
    constexpr int kBM = 8 * kTiles;
    constexpr int kRec = SM::kRec;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    constexpr int kWB = LB::kWeightBytes;
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
    const int nb16 = p.n_pad >> 4, nsb = p.n_pad >> 7;
    const long long units = static_cast<long long>(nmb) * nb16;
    const int r0 = static_cast<int>(units * blockIdx.x / gridDim.x);
    const int r1 = static_cast<int>(units * (blockIdx.x + 1) / gridDim.x);
    if (r0 >= r1) return;
    const int gs0 = r0 >> 3;  // item (m-block, super-block) of row-block r is r / 8
    const int n_items = ((r1 - 1) >> 3) + 1 - gs0;
    const int my_items = n_items > gid ? (n_items - gid + 3) / 4 : 0;
    const int steps = my_items * nst;
    if (steps == 0) return;

    const u32 gsm = smem_addr(smem_raw) + gid * decode_group_smem<kFormat, kTiles, kStages, kRecs>();
    const u32 bars = gsm + kStages * SM::kStage;
    // One thread per group issues the weight copies, in a different warp slot in each group so the
    // four producers sit on four different schedulers.
    const bool producer = wig == gid && lane == 0;
    if (tid == 128 * gid) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) mbar_init(bars + 8 * s, 129);  // 128 cp.async arrivals + the weights
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
        it.mb = G / nsb;
        it.sb = G - it.mb * nsb;
        const int rbase = 8 * G;
        const int lo = max(r0 - rbase, 0), hi = min(r1 - rbase, 8);  // active row-blocks [lo, hi)
        it.mask = ((1 << hi) - 1) & ~((1 << lo) - 1);
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
            if (m == 0xFF) {
                mbar_arrive_expect_tx(bar, kRecs * kRec);
                bulk_g2s_hint(st, rec, kRecs * kRec, bar, policy);
            } else {
                const int b0 = __ffs(m) - 1, b1 = 32 - __clz(m);
                mbar_arrive_expect_tx(bar, kRecs * (b1 - b0) * (512 + kScB));
#pragma unroll
                for (int j = 0; j < kRecs; ++j) {
                    bulk_g2s_hint(st + j * kRec + b0 * 512, rec + j * kRec + b0 * 512, (b1 - b0) * 512, bar, policy);
                    bulk_g2s_hint(st + j * kRec + kWB + b0 * kScB, rec + j * kRec + kWB + b0 * kScB, (b1 - b0) * kScB,
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

    // ---- consumer state: warp wig owns row-blocks 2 wig and 2 wig + 1 of each item ----
    float acc[2][kTiles][4];
    int c_mb = 0, c_valid = 0, c_ntiles = 0, c_sb = 0, c_act = 0;  // c_act: bit h = row-block 2 wig + h active
    int c_q = 0, c_j = 0;
    int e_tok[kTiles][2];
    float e_wt[kTiles][2];
    int pend_rb[2] = {-1, -1};  // down: slices whose counters this warp still has to bump
    int pend_prev[2] = {0, 0};
    bool pend_check = false;
    const int lrow = lane & 7, lmat = lane >> 3;
    const u32 w_off = (2 * wig) * 512 + lane * 16;                                   // this lane's weights
    const u32 s_off = kWB + (2 * wig) * kScB + g * (kFormat == kFormatInt4 ? 8 : 4); // its scales
    const u32 x_off = SM::kOffX + lrow * SM::kXStride + lmat * 16;                   // its ldmatrix row

    // down: bump the counters of the previous item's slices (its adds have long been issued).
    auto bump_counters = [&]() {
        __threadfence();
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int prev = 0;
            if (pend_rb[h] >= 0 && lane == 0) prev = atomicAdd(p.counters + pend_rb[h], 1);
            pend_prev[h] = prev;
        }
        pend_check = true;
    };
    auto finish_counters = [&]() {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int prev = __shfl_sync(0xffffffffu, pend_prev[h], 0);
            if (pend_rb[h] >= 0 && prev == nmb - 1) {
                __threadfence();
                decode_convert_slice(p, pend_rb[h], lane);
                if (lane == 0) p.counters[pend_rb[h]] = 0;
            }
            pend_rb[h] = -1;
        }
        pend_check = false;
    };

    auto consume = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        if (c_q == 0) {
            const uint4 meta = lds128(st + SM::kOffMeta);
            c_mb = static_cast<int>(meta.x);
            c_valid = static_cast<int>(meta.y);
            c_act = (meta.z >> (2 * wig)) & 3u;
            c_ntiles = (c_valid + 7) >> 3;
            c_sb = (gs0 + gid + 4 * c_j) - c_mb * nsb;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < kTiles; ++i) acc[h][i][0] = acc[h][i][1] = acc[h][i][2] = acc[h][i][3] = 0.0f;
            if constexpr (kMode == 1) {
#pragma unroll
                for (int i = 0; i < kTiles; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int pos = c_mb * kBM + 8 * i + 2 * t + e;
                        e_tok[i][e] = __ldg(p.sorted_token + pos);
                        e_wt[i][e] = __ldg(p.sorted_weight + pos);
                    }
                if (pend_rb[0] >= 0 || pend_rb[1] >= 0) bump_counters();
            }
        }
        if constexpr (kMode == 1) {
            if (c_q == nst - 1 && pend_check) finish_counters();
        }
        if (c_act && !kSkipMath) {
            // Both row-blocks are computed whenever the warp is active; an inactive one (only at the
            // edge of an SM's share) reads stale shared memory and its results are never stored.
#pragma unroll
            for (int j = 0; j < kRecs; ++j) {
                const u32 rec = st + j * kRec;
                u32 words[2][4], m[2][4];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint4 wv = lds128(rec + w_off + h * 512);
                    words[h][0] = wv.x;
                    words[h][1] = wv.y;
                    words[h][2] = wv.z;
                    words[h][3] = wv.w;
                    uint2 sv;
                    if constexpr (kFormat == kFormatInt4) {
                        sv = lds64(rec + s_off + h * kScB);
                    } else {
                        sv.x = lds32(rec + s_off + h * kScB);
                        sv.y = 0;
                    }
                    expand_scales<kFormat, kWideScale>(sv, m[h]);
                }
#pragma unroll
                for (int c = 0; c < 2; ++c) {  // k32 halves of the record
                    u32 b[kTiles][4];
#pragma unroll
                    for (int i = 0; i < kTiles; ++i) {
                        if (i == 0 || i < c_ntiles)
                            ldmatrix_x4(st + x_off + i * (8 * SM::kXStride) + j * 128 + c * 64, b[i][0], b[i][1], b[i][2],
                                        b[i][3]);
                    }
#pragma unroll
                    for (int s2 = 0; s2 < 2; ++s2) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            u32 a[4];
                            dequant_word<kFormat, kWideScale>(words[h][2 * c + s2], m[h][2 * c], m[h][2 * c + 1], a);
#pragma unroll
                            for (int i = 0; i < kTiles; ++i) {
                                if (i == 0 || i < c_ntiles)
                                    mma_bf16_16816(acc[h][i], a[0], a[1], a[2], a[3], b[i][2 * s2], b[i][2 * s2 + 1]);
                            }
                        }
                    }
                }
            }
        }
        if (c_q == nst - 1 && c_act) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (!((c_act >> h) & 1)) continue;
                const int rb = 8 * c_sb + 2 * wig + h;  // row-block within the matrix
                if constexpr (kMode == 0) {
                    const int col = rb * 8 + g;
#pragma unroll
                    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int r = 8 * i + 2 * t + e;
                            if (r < c_valid) {
                                const float hv = glu<kAct>(acc[h][i][e], acc[h][i][2 + e]);
                                p.inter[static_cast<long long>(c_mb * kBM + r) * p.inter_stride + col] =
                                    __float2bfloat16(hv);
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
                                if (n0 < p.n_real) red_add_f32(dst + n0, wt * acc[h][i][e]);
                                if (n0 + 8 < p.n_real) red_add_f32(dst + n0 + 8, wt * acc[h][i][2 + e]);
                            }
                        }
                    }
                    pend_rb[h] = rb;
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
    if constexpr (kMode == 1) {
        if (pend_check) finish_counters();
        if (pend_rb[0] >= 0 || pend_rb[1] >= 0) {
            bump_counters();
            finish_counters();
        }
    }
}

}  // namespace moe
}  // namespace kiln_dev
