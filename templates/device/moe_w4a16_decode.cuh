// moe_w4a16 decode GEMM (indexed mode, sm_90): swapped operands, dequantised weights on MMA-M and
// tokens on MMA-N (mma.sync m16n8k16), m-blocks of 8 * kTiles routed rows. Reads the decode_mma16
// layout (128-row super-blocks).
//
// One persistent CTA per SM, 512 threads = 4 groups x 4 warps. Work items are (m-block, 128-row
// super-block[, K chunk]); each warp owns two 16-row blocks of an item over the item's K range (the
// token fragments it loads feed both). A group runs its items as one flat sequence of K stages (64 or
// 128 inputs) through a kStages-deep pipeline: per stage one thread issues one bulk async copy of the
// item's weight records (scales included, contiguous in the layout) and the group's threads copy the
// gathered token rows with cp.async, all completing on the stage's mbarrier; the warps share the
// token tile through ldmatrix. Rows past the m-block's count are not copied (their MMA columns are
// never stored), and token tiles after the first are skipped when the m-block has fewer rows
// (semi-static tiling).
//
// Schedules (kSched):
//   0 static:  the list of 16-row row-blocks over all m-blocks is cut into equal contiguous shares,
//              one per CTA (equal weight bytes per SM); the four groups take the share's items
//              round-robin. Whole K per item.
//   1 dynamic: groups claim items with one atomic each (work[0]) in the order given by
//              order_window, one claim ahead. Items may cover a chunk of K (k_chunk records) so that
//              there are enough of them to balance: down adds its partial sums into the fp32
//              accumulator anyway; gate_up adds them into split_acc and the warp completing an
//              item's last chunk applies the GLU. The producer warp publishes the next item's
//              description in a small shared-memory slot one produce call ahead (every produce call
//              is separated from the next by the group's named barrier); a sentinel item (valid rows
//              -1) ends the group's pipeline. The last group to finish re-zeroes work[].
//
// kMode 0 (gate_up): weights are the gate/up rows interleaved per 8 (layout built with
//   gate_up = true), the epilogue applies the GLU in fp32 and stores bf16 rows of the intermediate
//   [rows, inter_stride], one row per sorted position.
// kMode 1 (down, combined): x is that intermediate; the epilogue multiplies by the router weight and
//   adds into the fp32 accumulator acc [M, acc_stride] (zero between calls). Each 16-column slice has
//   a counter; the warp whose increment completes a slice (num_mblocks x K chunks contributions)
//   writes the bf16 output of that slice for all tokens, zeroes the slice of acc and resets its
//   counter, so a call leaves acc and the counters as it found them. A warp increments one item late,
//   so the fence behind its atomic adds never stalls the pipeline.
// kMode 2 (down, rows): the epilogue stores the router-weighted bf16 row of every sorted position into
//   out [rows, out_stride]; moe_w4a16_combine (moe_w4a16_combine.cuh) sums each token's rows. No
//   atomics; whole K per item.
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
    float* acc;             // down (kMode 1): fp32 accumulator [M, acc_stride]
    i32 acc_stride;
    __nv_bfloat16* out;     // kMode 1: bf16 output [M, out_stride]; kMode 2: bf16 rows [rows, out_stride]
    i32 out_stride;
    i32* counters;          // down (kMode 1): [n_pad / 16], zero between calls
    // dynamic schedule (kSched 1)
    i32* work;              // [2]: items claimed, groups finished; zero between calls
    float* split_acc;       // gate_up K-split partial sums: split_cap x 128 x (8 kTiles) fp32, zero between calls
    i32* split_cnt;         // gate_up K-split counters: [split_cap x 4], zero between calls
    i32 split_cap;          // (m-block, super-block) items split_acc holds
    i32 k_chunk;            // 64-wide records per item along K (rounded up to kRecs); <= 0: whole K
    i32 split_max_items;    // split K only while num_mblocks x n_pad / 128 <= this
    i32 order_window;       // claim order: windows of this many m-blocks, (super-block, chunk) major
                            // inside a window (1: m-block major, each matrix streamed in order)
};

constexpr int kDecodeThreads = 512;
constexpr int kDecodeBlocks = 8;     // row-blocks per super-block (decode_mma16)
constexpr int kItemSlotInts = 40;    // dynamic schedule: one published item (8 header ints + 32 tokens)

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
// Four groups; the dynamic schedule adds two item slots per group behind them.
template <int kFormat, int kTiles, int kRecs, int kSched>
__host__ __device__ constexpr int decode_smem_bytes_n(int stages) {
    return 4 * (stages * DecodeSmem<kFormat, kTiles, kRecs>::kStage + ((8 * stages + 127) / 128) * 128) +
           (kSched == 1 ? 4 * 2 * kItemSlotInts * 4 : 0);
}
template <int kFormat, int kTiles, int kStages, int kRecs, int kSched = 0>
__host__ __device__ constexpr int decode_smem_bytes() {
    return decode_smem_bytes_n<kFormat, kTiles, kRecs, kSched>(kStages);
}
// Deepest pipeline (at most 8 stages) that fits the 227 KB of shared memory of one CTA.
template <int kFormat, int kTiles, int kRecs, int kSched>
__host__ __device__ constexpr int decode_default_stages() {
    int s = 8;
    while (s > 2 && decode_smem_bytes_n<kFormat, kTiles, kRecs, kSched>(s) > 232448) --s;
    return s;
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
// kSched: 0 static shares, 1 dynamic claiming (see the top of this file).
// kSkipMath: measurement variant that streams the same bytes and skips dequantisation and MMAs.
template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kTiles, int kStages, int kRecs,
          int kSched = 0, bool kSkipMath = false>
__global__ void __launch_bounds__(kDecodeThreads, 1) moe_w4a16_decode(const DecodeParams p) {
    static_assert(kTiles >= 1 && kTiles <= 4, "1..4 token tiles of 8");
    static_assert(kStages >= 2, "at least two stages");
    static_assert(kRecs == 1 || kRecs == 2, "one or two records per stage");
    static_assert(kMode >= 0 && kMode <= 2, "gate_up, down combined, down rows");
    static_assert(kSched == 0 || kSched == 1, "static or dynamic schedule");
    using SM = DecodeSmem<kFormat, kTiles, kRecs>;
    using LB = typename SM::LB;
    constexpr int kBM = 8 * kTiles;
    constexpr int kRec = SM::kRec;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    constexpr int kWB = LB::kWeightBytes;
    constexpr int kChunks = 64 * kRecs * kTiles;  // 16-byte token chunks per stage
    constexpr int kCpt = (kChunks + 127) / 128;    // per thread
    constexpr bool kDyn = kSched == 1;
    constexpr bool kSplitGU = kMode == 0 && kDyn;  // gate_up may split K (dynamic schedule only)
    constexpr int kGroupSmem = decode_group_smem<kFormat, kTiles, kStages, kRecs>();

    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int gid = warp >> 2, wig = warp & 3, tg = tid & 127;
    const int g = lane >> 2, t = lane & 3;

    const int nq = p.k_pad >> 6;
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

    // K chunks per item (dynamic schedule only; kMode 2 stores finished rows and never splits).
    int chunk = nq, ksplit = 1;
    if constexpr (kDyn && kMode != 2) {
        const int base = nmb * nsb;
        const int want = (p.k_chunk + kRecs - 1) / kRecs * kRecs;
        if (want > 0 && want < nq && base <= p.split_max_items && (kMode == 1 || base <= p.split_cap)) {
            chunk = want;
            ksplit = (nq + chunk - 1) / chunk;
        }
    }

    // ---- static schedule: this CTA's share ----
    int r0 = 0, r1 = 0, gs0 = 0, my_items = 0, steps = 0;
    if constexpr (!kDyn) {
        const long long units = static_cast<long long>(nmb) * nb16;
        r0 = static_cast<int>(units * blockIdx.x / gridDim.x);
        r1 = static_cast<int>(units * (blockIdx.x + 1) / gridDim.x);
        if (r0 >= r1) return;
        gs0 = r0 >> 3;  // item (m-block, super-block) of row-block r is r / 8
        const int n_items = ((r1 - 1) >> 3) + 1 - gs0;
        my_items = n_items > gid ? (n_items - gid + 3) / 4 : 0;
        steps = my_items * (nq / kRecs);
        if (steps == 0) return;
    }

    const u32 gsm = smem_addr(smem_raw) + gid * kGroupSmem;
    const u32 bars = gsm + kStages * SM::kStage;
    // One thread per group issues the weight copies, in a different warp slot in each group so the
    // four producers sit on four different schedulers. Its warp runs the dynamic claims.
    const bool producer_warp = wig == gid;
    const bool producer = producer_warp && lane == 0;
    if (tid == 128 * gid) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) mbar_init(bars + 8 * s, 129);  // 128 cp.async arrivals + the weights
        fence_mbar_init();
    }

    const u64 policy = evict_first_policy();
    int pq = 0;  // stage of the producer's current item

    // ---- static producer state: the item whose stages are being issued, and the next one ----
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
    Item cur{}, nxt{};
    int pj = 0;

    // ---- dynamic producer state ----
    // Published item slot (shared): [0] mb, [1] sb, [2] K chunk, [3] expert, [4] valid rows (-1: the
    // sentinel), [5] first record, [6] stages, [8 + r] token of row r (gate_up).
    int* const slots = reinterpret_cast<int*>(smem_raw + 4 * kGroupSmem) + gid * 2 * kItemSlotInts;
    int cslot = 0;        // slot the next item is read from / published to
    int cur_q0 = 0, cur_nst = 0, cur_kc = 0;
    bool sent = false;    // the sentinel stage has been issued
    const int total_items = nmb * nsb * ksplit;
    const int win = kDyn ? min(max(p.order_window, 1), nmb) : 1;
    // Producer warp only: the item after the current one (loads in flight) and the claim after that.
    int nx_mb = 0, nx_sb = 0, nx_kc = 0, nx_expert = 0, nx_valid = -1, nx_tok = -1, pending = 0;
    auto claim = [&]() {
        int id = 0;
        if (lane == 0) id = atomicAdd(p.work, 1);
        return id;  // lane 0's value; broadcast when used
    };
    auto load_next = [&](int id) {  // producer warp, id warp-uniform
        nx_mb = nx_sb = nx_kc = nx_expert = 0;
        nx_valid = -1;
        nx_tok = -1;
        if (id < total_items) {
            const int per_mb = nsb * ksplit;
            const int full = nmb / win;
            const int items_full = full * win * per_mb;
            int rest;
            if (id < items_full) {
                const int wi = id / (win * per_mb);
                const int rem = id - wi * win * per_mb;
                nx_mb = wi * win + rem % win;
                rest = rem / win;
            } else {
                const int wl = nmb - full * win;
                const int rem = id - items_full;
                nx_mb = full * win + rem % wl;
                rest = rem / wl;
            }
            nx_sb = rest / ksplit;
            nx_kc = rest - nx_sb * ksplit;
            const int2 info = __ldg(p.mblock_info + nx_mb);
            nx_expert = info.x;
            nx_valid = info.y;
            if constexpr (kMode == 0) {
                if (lane < kBM) nx_tok = __ldg(p.sorted_token + nx_mb * kBM + lane);
            }
        }
    };
    auto publish_next = [&](int slot) {  // producer warp
        int* s = slots + slot * kItemSlotInts;
        if (lane == 0) {
            const int q0 = nx_kc * chunk;
            s[0] = nx_mb;
            s[1] = nx_sb;
            s[2] = nx_kc;
            s[3] = nx_expert;
            s[4] = nx_valid;
            s[5] = q0;
            s[6] = (min(nq, q0 + chunk) - q0) / kRecs;
        }
        if (lane < kBM) s[8 + lane] = nx_tok;
    };
    if constexpr (kDyn) {
        if (producer_warp) {
            load_next(__shfl_sync(0xffffffffu, claim(), 0));
            publish_next(0);
            load_next(__shfl_sync(0xffffffffu, claim(), 0));
            pending = claim();
        }
    } else {
        cur = make_item(0);
        nxt = cur;
        if (my_items > 1) nxt = make_item(1);
    }
    named_barrier(1 + gid, 128);

    // Token rows of one stage (all 128 threads of the group), then the thread's cp.async arrival.
    auto copy_tokens = [&](u32 st, u32 bar, int q0, int mb, int valid) {
        const int ntiles = (valid + 7) >> 3;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            const int c = tg + 128 * h;
            const int row = c / (8 * kRecs), kc = c % (8 * kRecs);
            if (c < kChunks && (row >> 3) < ntiles && row < valid) {
                const int k = q0 * 64 + kc * 8;
                int bytes = 16;
                if constexpr (kMaskK) bytes = max(0, min(16, (p.k_real - k) * 2));
                const __nv_bfloat16* src;
                if constexpr (kMode == 0)
                    src = p.x + static_cast<long long>(cur.tok[h]) * p.x_stride + k;
                else
                    src = p.x + static_cast<long long>(mb * kBM + row) * p.x_stride + k;
                cp_async16(st + SM::kOffX + row * SM::kXStride + kc * 16, bytes ? src : p.x, bytes);
            }
        }
        cp_async_mbar_arrive(bar);
    };

    auto produce_static = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        const u32 bar = bars + 8 * slot;
        const int q0 = pq * kRecs;
        copy_tokens(st, bar, q0, cur.mb, cur.valid);
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
        if (++pq == nq / kRecs) {
            pq = 0;
            ++pj;
            cur = nxt;
            if (pj + 1 < my_items) nxt = make_item(pj + 1);
        }
    };

    auto produce_dynamic = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        const u32 bar = bars + 8 * slot;
        if (pq == 0) {  // start of an item: read what the producer warp published one call earlier
            const int* s = slots + cslot * kItemSlotInts;
            cur.mb = s[0];
            cur.sb = s[1];
            cur_kc = s[2];
            cur.expert = s[3];
            cur.valid = s[4];
            cur_q0 = s[5];
            cur_nst = s[6];
#pragma unroll
            for (int h = 0; h < kCpt; ++h) {
                const int row = (tg + 128 * h) / (8 * kRecs);
                cur.tok[h] = row < kBM ? s[8 + row] : -1;
            }
            cslot ^= 1;
        }
        if (cur.valid < 0) {  // sentinel: a stage with no data that tells the consumers to stop
            if (producer) {
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta), "r"(0), "r"(-1),
                             "r"(0), "r"(0)
                             : "memory");
                mbar_arrive_expect_tx(bar, 0);
            }
            cp_async_mbar_arrive(bar);
            sent = true;
            return;
        }
        const int q0 = cur_q0 + pq * kRecs;
        copy_tokens(st, bar, q0, cur.mb, cur.valid);
        if (producer) {
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta), "r"(cur.mb),
                         "r"(cur.valid), "r"(cur.sb), "r"(cur_kc)
                         : "memory");
            const u8* rec = p.weights + static_cast<u64>(cur.expert) * p.expert_stride +
                            static_cast<u64>(cur.sb * nq + q0) * kRec;
            mbar_arrive_expect_tx(bar, kRecs * kRec);
            bulk_g2s_hint(st, rec, kRecs * kRec, bar, policy);
        }
        if (++pq == cur_nst) {
            pq = 0;
            if (producer_warp) {  // publish the next item for the next call, load the one after it
                publish_next(cslot);
                load_next(__shfl_sync(0xffffffffu, pending, 0));
                pending = claim();
            }
        }
    };

    // ---- consumer state: warp wig owns row-blocks 2 wig and 2 wig + 1 of each item ----
    float acc[2][kTiles][4];
    int c_mb = 0, c_valid = 0, c_ntiles = 0, c_sb = 0, c_act = 0;  // c_act: bit h = row-block 2 wig + h active
    int c_q = 0, c_j = 0, c_nst = nq / kRecs;
    int e_tok[kTiles][2];
    float e_wt[kTiles][2];
    int pend_rb[2] = {-1, -1};  // down: slices whose counters this warp still has to bump
    int pend_prev[2] = {0, 0};
    bool pend_check = false;
    const int contributions = nmb * ksplit;  // per down slice
    // gate_up K-split: the item whose partial sums this warp added last, not yet counted / checked
    int gp_item = -1, gp_mb = 0, gp_valid = 0, gp_sb = 0, gp_prev = 0;
    bool gp_check = false;
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
            if (pend_rb[h] >= 0 && prev == contributions - 1) {
                __threadfence();
                decode_convert_slice(p, pend_rb[h], lane);
                if (lane == 0) p.counters[pend_rb[h]] = 0;
            }
            pend_rb[h] = -1;
        }
        pend_check = false;
    };

    // gate_up: the GLU of one accumulator fragment (row-block 2 wig + h, token tile i) into the intermediate.
    auto store_glu = [&](int mb, int valid, int sb, int h, int i, float g0, float g1, float u0, float u1) {
        const int col = (8 * sb + 2 * wig + h) * 8 + g;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int r = 8 * i + 2 * t + e;
            if (r < valid)
                p.inter[static_cast<long long>(mb * kBM + r) * p.inter_stride + col] =
                    __float2bfloat16(glu<kAct>(e ? g1 : g0, e ? u1 : u0));
        }
    };
    auto split_bump = [&]() {
        __threadfence();
        int prev = 0;
        if (lane == 0) prev = atomicAdd(p.split_cnt + gp_item, 1);
        gp_prev = prev;
        gp_check = true;
    };
    auto split_finish = [&]() {
        const int prev = __shfl_sync(0xffffffffu, gp_prev, 0);
        if (prev == ksplit - 1) {
            __threadfence();
            float* sp = p.split_acc + static_cast<long long>(gp_item) * (256 * kTiles) + lane * 4;
            const int nt = (gp_valid + 7) >> 3;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
                    if (i == 0 || i < nt) {
                        float* q = sp + (h * kTiles + i) * 128;
                        const float4 v = ldcg_f4(q);
                        *reinterpret_cast<float4*>(q) = make_float4(0.f, 0.f, 0.f, 0.f);
                        store_glu(gp_mb, gp_valid, gp_sb, h, i, v.x, v.y, v.z, v.w);
                    }
                }
            if (lane == 0) p.split_cnt[gp_item] = 0;
        }
        gp_item = -1;
        gp_check = false;
    };

    // Returns false on the sentinel stage (dynamic schedule).
    auto consume = [&](int slot) -> bool {
        const u32 st = gsm + slot * SM::kStage;
        if (c_q == 0) {
            const uint4 meta = lds128(st + SM::kOffMeta);
            c_mb = static_cast<int>(meta.x);
            c_valid = static_cast<int>(meta.y);
            if constexpr (kDyn) {
                if (c_valid < 0) return false;
                c_sb = static_cast<int>(meta.z);
                const int q0 = static_cast<int>(meta.w) * chunk;
                c_nst = (min(nq, q0 + chunk) - q0) / kRecs;
                c_act = 3;
            } else {
                c_act = (meta.z >> (2 * wig)) & 3u;
                c_sb = (gs0 + gid + 4 * c_j) - c_mb * nsb;
            }
            c_ntiles = (c_valid + 7) >> 3;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < kTiles; ++i) acc[h][i][0] = acc[h][i][1] = acc[h][i][2] = acc[h][i][3] = 0.0f;
            if constexpr (kMode >= 1) {
#pragma unroll
                for (int i = 0; i < kTiles; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int pos = c_mb * kBM + 8 * i + 2 * t + e;
                        if constexpr (kMode == 1) e_tok[i][e] = __ldg(p.sorted_token + pos);
                        e_wt[i][e] = __ldg(p.sorted_weight + pos);
                    }
            }
            if constexpr (kMode == 1) {
                if (pend_rb[0] >= 0 || pend_rb[1] >= 0) bump_counters();
            }
            if constexpr (kMode == 0 && kDyn) {
                if (gp_item >= 0) split_bump();
            }
        }
        if constexpr (kMode == 1) {
            if (c_q == c_nst - 1 && pend_check) finish_counters();
        }
        if constexpr (kMode == 0 && kDyn) {
            if (c_q == c_nst - 1 && gp_check) split_finish();
        }
        if (c_act && !kSkipMath) {
            // Both row-blocks are computed whenever the warp is active; an inactive one (only at the
            // edge of a static share) reads stale shared memory and its results are never stored.
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
        if (c_q == c_nst - 1 && c_act) {
            if (kSplitGU && ksplit > 1) {
                // K-split gate_up: add this chunk's partial sums; the GLU runs once all chunks are in.
                float* sp = p.split_acc + static_cast<long long>((c_mb * nsb + c_sb) * 4 + wig) * (256 * kTiles) + lane * 4;
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int i = 0; i < kTiles; ++i)
                        if (i == 0 || i < c_ntiles)
                            red_add_v4_f32(sp + (h * kTiles + i) * 128, acc[h][i][0], acc[h][i][1], acc[h][i][2],
                                           acc[h][i][3]);
                gp_item = (c_mb * nsb + c_sb) * 4 + wig;
                gp_mb = c_mb;
                gp_valid = c_valid;
                gp_sb = c_sb;
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if (!((c_act >> h) & 1)) continue;
                    const int rb = 8 * c_sb + 2 * wig + h;  // row-block within the matrix
                    if constexpr (kMode == 0) {
#pragma unroll
                        for (int i = 0; i < kTiles; ++i)
                            store_glu(c_mb, c_valid, c_sb, h, i, acc[h][i][0], acc[h][i][1], acc[h][i][2], acc[h][i][3]);
                    } else if constexpr (kMode == 1) {
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
                    } else {
                        const int n0 = rb * 16 + g;
#pragma unroll
                        for (int i = 0; i < kTiles; ++i) {
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int r = 8 * i + 2 * t + e;
                                if (r < c_valid) {
                                    __nv_bfloat16* dst = p.out + static_cast<long long>(c_mb * kBM + r) * p.out_stride;
                                    const float wt = e_wt[i][e];
                                    if (n0 < p.n_real) dst[n0] = __float2bfloat16(wt * acc[h][i][e]);
                                    if (n0 + 8 < p.n_real) dst[n0 + 8] = __float2bfloat16(wt * acc[h][i][2 + e]);
                                }
                            }
                        }
                    }
                }
            }
        }
        if (++c_q == c_nst) {
            c_q = 0;
            ++c_j;
        }
        return true;
    };

    // ---- pipeline: stage i lives in slot i % kStages; its mbarrier phase is (i / kStages) & 1 ----
    int slot_c = 0, slot_p = kStages - 1;
    u32 phase = 0;
    if constexpr (!kDyn) {
#pragma unroll 1
        for (int s = 0; s < kStages - 1; ++s)
            if (s < steps) produce_static(s);
#pragma unroll 1
        for (int i = 0; i < steps; ++i) {
            mbar_wait(bars + 8 * slot_c, phase);
            named_barrier(1 + gid, 128);  // every warp is done with the slot refilled below
            if (i + kStages - 1 < steps) {
                if (producer) fence_proxy_async();
                produce_static(slot_p);
            }
            consume(slot_c);
            if (++slot_c == kStages) {
                slot_c = 0;
                phase ^= 1u;
            }
            slot_p = slot_p + 1 == kStages ? 0 : slot_p + 1;
        }
    } else {
        // Every produce call is separated from the next by the group barrier (the item slots rely on it).
#pragma unroll 1
        for (int s = 0; s < kStages - 1; ++s) {
            if (s) named_barrier(1 + gid, 128);
            if (!sent) produce_dynamic(s);
        }
#pragma unroll 1
        for (;;) {
            mbar_wait(bars + 8 * slot_c, phase);
            named_barrier(1 + gid, 128);  // every warp is done with the slot refilled below
            if (!sent) {
                if (producer) fence_proxy_async();
                produce_dynamic(slot_p);
            }
            if (!consume(slot_c)) break;
            if (++slot_c == kStages) {
                slot_c = 0;
                phase ^= 1u;
            }
            slot_p = slot_p + 1 == kStages ? 0 : slot_p + 1;
        }
    }
    if constexpr (kMode == 1) {
        if (pend_check) finish_counters();
        if (pend_rb[0] >= 0 || pend_rb[1] >= 0) {
            bump_counters();
            finish_counters();
        }
    }
    if constexpr (kMode == 0 && kDyn) {
        if (gp_check) split_finish();
        if (gp_item >= 0) {
            split_bump();
            split_finish();
        }
    }
    if constexpr (kDyn) {
        // The last group out re-zeroes the claim counter: every group's claims precede its increment.
        if (producer) {
            __threadfence();
            const int done = atomicAdd(p.work + 1, 1);
            if (done == 4 * static_cast<int>(gridDim.x) - 1) {
                atomicExch(p.work, 0);
                atomicExch(p.work + 1, 0);
            }
        }
    }
}

}  // namespace moe
}  // namespace kiln_dev
