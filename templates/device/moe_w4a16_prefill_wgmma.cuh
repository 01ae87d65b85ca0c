// moe_w4a16 prefill GEMM with warpgroup MMA (indexed mode, sm_90a only): the tiles, layout
// (decode_mma16), parameters and epilogues of moe_w4a16_prefill (kRB 1, block_m 64), with the MMAs
// issued as wgmma.mma_async: the dequantised weights are the register A operand of m64nNk16 (warp w of
// warpgroup v supplies row-block 4v + w of its super-block, its m16n8k16 A fragment as the decode
// layout stores it), the m-block's gathered token rows the shared-memory B operand (K-major, 128-byte
// swizzle: per 64-wide record, 8-row atoms of 1024 bytes). N = 16, 32, 48 or 64, picked per m-block
// from its row count (warpgroup-uniform), so a part-filled m-block does not pay for 64 token columns.
//
// CTA shapes: kPar super-blocks side by side (kPar 2: 512 threads, one CTA per SM with the whole shared
// memory; the token tile is read from L2 once per 256 weight rows instead of once per 128) and kNsb
// super-blocks one after another (short K, e.g. TP-sliced down with K 256: one super-block is only a
// few steps, so a CTA per super-block would be mostly prologue and epilogue; the token tile then stays
// in shared memory when it fits in the ring, loaded once for all super-blocks). One of the two is 1.
//
// Pipelining (wgmma is asynchronous): each 64-wide record is one commit group of four k16 wgmmas; the
// next record's shared-memory loads and dequantisation run while it is in flight (down: wait_group 1
// after each commit retires the record before; gate_up: wait_group 2, two records in flight, three A
// buffers). The last record of a step may still be reading its slots
// during the next step, so a step refills the slots of the step two back (after the CTA barrier, every
// warp has retired it): kStages - 2 weight steps and kXS - 2 token steps are prefetched. One record per
// step (K padded to 64 but not to 128) uses a single A buffer and waits for each group (wait_group 0).
#pragma once

#include "device/moe_w4a16_prefill.cuh"
#include "device/wgmma.cuh"

namespace kiln_dev {
namespace moe {

// Shared memory: [kXS token tiles (kRecs records x 64 rows x 128 bytes, 128-byte swizzle) | kStages weight
// slots (kPar super-blocks x kRecs records) | mbarriers (tokens, then weights)]. Per CTA at most 112 KB
// with kPar 1 (two CTAs per SM), 227 KB with kPar 2.
template <int kFormat, int kRecs, int kPar = 1>
struct PrefillWgmmaSmem {
    using LB = LayoutBytes<kFormat, kDecodeBlocks>;
    static constexpr int kRec = LB::kRecordBytes;
    static constexpr int kWSub = kRecs * kRec;  // one super-block's records of a step
    static constexpr int kWSlot = kPar * kWSub;
    static constexpr int kXTile = 64 * 128 * kRecs;
    static constexpr int kXStages = 4;
    static constexpr int kOffW = kXStages * kXTile;
    static constexpr int kLimit = kPar == 1 ? kPrefillSmemLimit : 232448;
};

template <int kFormat, int kRecs, int kPar = 1>
__host__ __device__ constexpr int prefill_wgmma_smem_bytes(int stages) {
    using SM = PrefillWgmmaSmem<kFormat, kRecs, kPar>;
    return SM::kOffW + stages * SM::kWSlot + ((8 * (stages + SM::kXStages) + 127) / 128) * 128;
}
template <int kFormat, int kRecs, int kPar = 1>
__host__ __device__ constexpr int prefill_wgmma_default_stages() {
    int s = 24;
    while (s > 3 && prefill_wgmma_smem_bytes<kFormat, kRecs, kPar>(s) > PrefillWgmmaSmem<kFormat, kRecs, kPar>::kLimit) --s;
    return s;
}

// The four k16 wgmmas of one record: D[64 rows x 16 nsel tokens] += A (a[s], k16 step s) * B.
// desc: the descriptor of k16 step 0; step s starts 32 bytes further into the swizzled rows (2 in the
// descriptor's address field).
// first: the accumulators start from zero (scale-d 0 on step 0), so they are never rewritten by ordinary
// instructions between super-blocks.
template <int kN>
__device__ __forceinline__ void prefill_record_mma(float* acc, const u32 (&a)[4][4], u64 desc, bool first) {
    wgmma::MmaRS<kN>::run(acc, a[0][0], a[0][1], a[0][2], a[0][3], desc, first ? 0 : 1);
#pragma unroll
    for (int s = 1; s < 4; ++s) wgmma::MmaRS<kN>::run(acc, a[s][0], a[s][1], a[s][2], a[s][3], desc + 2 * s, 1);
}

template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kStages, int kRecs, int kNsb = 1,
          int kPar = 1>
__global__ void __launch_bounds__(kPrefillThreads * kPar, kPar == 1 ? 2 : 1) moe_w4a16_prefill_wgmma(const DecodeParams p) {
    static_assert(kRecs == 1 || kRecs == 2, "one or two records per step");
    static_assert(kNsb >= 1 && kNsb <= 16, "1 to 16 super-blocks per CTA in sequence");
    static_assert(kPar == 1 || (kPar == 2 && kNsb == 1), "two super-blocks side by side, or several in sequence");
    static_assert(kStages >= 3, "at least three weight stages (refills run two steps behind)");
    static_assert(kMode == 0 || kMode == 2, "gate_up or down rows");
    using SM = PrefillWgmmaSmem<kFormat, kRecs, kPar>;
    using LB = typename SM::LB;
    constexpr int kThreads = kPrefillThreads * kPar;
    constexpr int kBM = 64;
    constexpr int kXS = SM::kXStages;
    constexpr int kRec = SM::kRec;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    constexpr int kWB = LB::kWeightBytes;
    constexpr int kWSub = SM::kWSub;
    constexpr int kWSlot = SM::kWSlot;
    constexpr int kCpt = 2 * kRecs / kPar;  // 16-byte token chunks per thread and step
    constexpr int kChunkStep = kThreads * 16;  // shared-memory bytes between a thread's chunks

    extern __shared__ __align__(1024) unsigned char smem_wg[];  // (its own name: smem_raw is declared 128-aligned)

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int sub = warp >> 3, rbw = warp & 7;  // super-block within the CTA, row-block within it
    const int g = lane >> 2, t = lane & 3;

    const int nsb = p.n_pad >> 7;
    const int ncol = (nsb + kNsb * kPar - 1) / (kNsb * kPar);
    const int mb = static_cast<int>(blockIdx.x) / ncol;
    const int sb0 = (static_cast<int>(blockIdx.x) - mb * ncol) * kNsb * kPar;
    if (mb >= *p.num_mblocks) return;
    const int nq = p.k_pad >> 6;
    const int nst = nq / kRecs;                                   // K steps per super-block
    const int total = (kPar == 1 ? min(kNsb, nsb - sb0) : 1) * nst;  // steps of this CTA
    // kPar 2: whether this warp's super-block exists. A missing one's warpgroup still runs its MMAs (on
    // whatever its half of the weight slot holds) and only skips the stores: a branch around wgmma makes
    // ptxas serialise every wgmma of the kernel.
    const bool live = sb0 + sub < nsb;
    const int npar = min(kPar, nsb - sb0);
    // The whole token tile stays in the ring (slot = K step) when a CTA walks super-blocks and their K
    // steps fit in the prefetched slots: loaded once, never refilled.
    const bool resident = kNsb > 1 && nst <= kXS - 2;
    const int2 info = __ldg(p.mblock_info + mb);
    const int valid = info.y;
    const long long row0 = static_cast<long long>(mb) * kBM;  // its first sorted row
    const int ntiles = (valid + 7) >> 3;
    const int nsel = (ntiles + 1) >> 1;  // wgmma N = 16 nsel

    const u32 sbase = smem_addr(smem_wg);
    if ((sbase & 1023u) != 0) __trap();  // the swizzled token atoms need 1024-byte alignment (no static smem)
    const u32 wbase = sbase + SM::kOffW;
    const u32 xbars = wbase + kStages * kWSlot;
    const u32 wbars = xbars + 8 * kXS;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < kXS; ++s) mbar_init(xbars + 8 * s, kThreads);
        for (int s = 0; s < kStages; ++s) mbar_init(wbars + 8 * s, 1);
        fence_mbar_init();
    }

    // Token copies: 8 consecutive threads copy one row's 128 bytes of a record (one L2 line per 8 lanes).
    // Chunk h of a thread is item (tid / 8) + kThreads / 8 h of the step's 64 kRecs rows x records, row =
    // item % 64, record = item / 64; the tile is K-major with the 128-byte swizzle (chunk c of row r at
    // chunk c ^ (r % 8) of the row; 8-row atoms of 1024 bytes), so the 8 lanes of a row also write 8
    // different bank groups. Source pointers are computed once.
    const int c = tid & 7;
    const __nv_bfloat16* src[kCpt];
#pragma unroll
    for (int h = 0; h < kCpt; ++h) {
        const int item = (tid >> 3) + (kThreads / 8) * h;
        const int row = item & 63;
        src[h] = nullptr;
        if (row < valid) {
            const int sr = kMode == 0 ? __ldg(p.sorted_token + row0 + row) : static_cast<int>(row0) + row;
            src[h] = p.x + static_cast<long long>(sr) * p.x_stride + (item >> 6) * 64 + c * 8;
        }
    }
    const int r8 = (tid >> 3) & 7;
    const u32 x_dst = ((tid >> 6) & 7) * 1024 + r8 * 128 + ((c ^ r8) << 4);  // chunk h: + kChunkStep h
    // The super-blocks of an expert are contiguous in the layout: step j of this CTA is record pair j.
    const u8* wrec = p.weights + static_cast<u64>(info.x) * p.expert_stride + static_cast<u64>(sb0) * nq * kRec;
    __syncthreads();

    auto produce_x = [&](int j, int slot) {  // step j: K step j % nst
        const int q = kNsb == 1 ? j : j % nst;
        const u32 st = sbase + slot * SM::kXTile + x_dst;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            if (src[h] != nullptr) {
                int bytes = 16;
                if constexpr (kMaskK) {
                    const int item = (tid >> 3) + (kThreads / 8) * h;
                    bytes = max(0, min(16, (p.k_real - (q * 64 * kRecs + (item >> 6) * 64 + c * 8)) * 2));
                }
                cp_async16(st + h * kChunkStep,
                           bytes ? static_cast<const void*>(src[h] + q * 64 * kRecs) : static_cast<const void*>(p.x), bytes);
            }
        }
        cp_async_mbar_arrive(xbars + 8 * slot);
    };
    auto produce_w = [&](int q, int slot) {  // kPar 1: step q of the walk; kPar 2: K step q of each super-block
        const u32 bar = wbars + 8 * slot;
        mbar_arrive_expect_tx(bar, npar * kWSub);
        for (int v = 0; v < npar; ++v)
            bulk_g2s(wbase + slot * kWSlot + v * kWSub, wrec + static_cast<u64>(v) * nq * kRec + static_cast<u64>(q) * kWSub,
                     kWSub, bar);
    };

    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.0f;

    const u32 w_off = sub * kWSub + rbw * 512 + lane * 16;
    const u32 s_off = sub * kWSub + kWB + rbw * kScB + g * (kFormat == kFormatInt4 ? 8 : 4);

    if (tid == 0) {
#pragma unroll 1
        for (int s = 0; s < kStages - 2 && s < total; ++s) produce_w(s, s);
    }
#pragma unroll 1
    for (int s = 0; s < kXS - 2 && s < total; ++s) produce_x(s, s);

    // Epilogue of one super-block (prefill_store_tile): accumulators 4j .. 4j + 3 are token tile j of
    // row-block `rbw`.
    const int odd = g & 1;
    float wt[8];  // down: the router weight of each token row this lane stores (read once per CTA)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int r = 8 * j + 2 * t + odd;
        wt[j] = kMode == 2 && r < valid ? __ldg(p.sorted_weight + row0 + r) : 0.0f;
    }
    auto store_block = [&](int sb) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (j >= ntiles) continue;
            const int r = 8 * j + 2 * t + odd;
            prefill_store_tile<kMode, kAct>(p, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3], g, r,
                                            row0 + r, 8 * sb + rbw, valid, wt[j]);
        }
    };

    // A buffers: with two records per step, gate_up keeps two wgmma groups in flight (three buffers,
    // wait_group 2) while it dequantises the next record; down keeps one (its registers leave no room).
    // Buffer of record r of step i: (2 i + r) % kBufs, a compile-time index in the step loop unrolled by
    // kBufs (below), so the buffers stay in registers.
    constexpr int kBufs = kRecs == 2 ? (kMode == 0 ? 3 : 2) : 1;
    const u64 desc_x = wgmma::desc_sw128(sbase);  // token tile of slot 0, record 0, k16 step 0
    u32 a[kBufs][4][4];
    int ws = 0, xs = 0;
    u32 wph = 0, xph = 0;
    int wp = kStages - 2, xp = kXS - 2;  // slots refilled this step: those of the step two back
    int kq = 0, sbi = sb0;               // K step within the super-block, the super-block
    wgmma::fence();
    // step i; boff: the buffer of its first record
    auto step = [&](int i, auto boff) {
        const int xslot = resident ? kq : xs;
        mbar_wait(wbars + 8 * ws, wph);
        mbar_wait(xbars + 8 * xslot, resident ? 0u : xph);
        __syncthreads();  // every warp has retired the wgmmas of step i - 2, which read the slots refilled here
        if (tid == 0 && i + kStages - 2 < total) produce_w(i + kStages - 2, wp);
        if (!resident && i + kXS - 2 < total) produce_x(i + kXS - 2, xp);
        {
            const u32 st0 = wbase + ws * kWSlot;
            u32 words[kRecs][4], m[kRecs][4];
            load_block<kFormat, kWideScale>(st0 + w_off, st0 + s_off, words[0], m[0]);
#pragma unroll
            for (int r = 0; r < kRecs; ++r) {
                const u64 desc = desc_x + ((xslot * SM::kXTile + r * kBM * 128) >> 4);
                u32(&ar)[4][4] = a[(decltype(boff)::value + r) % kBufs];
                const bool first = kNsb > 1 && r == 0 && kq == 0;  // (one super-block: zeroed before the loop)
#pragma unroll
                for (int s = 0; s < 4; ++s)
                    dequant_word<kFormat, kWideScale>(words[r][s], m[r][(s >> 1) * 2], m[r][(s >> 1) * 2 + 1], ar[s]);
                wgmma::fence();
                switch (nsel) {
                    case 1: prefill_record_mma<16>(acc, ar, desc, first); break;
                    case 2: prefill_record_mma<32>(acc, ar, desc, first); break;
                    case 3: prefill_record_mma<48>(acc, ar, desc, first); break;
                    default: prefill_record_mma<64>(acc, ar, desc, first); break;
                }
                // the next record's shared-memory loads go out before this warp waits for the tensor core
                if (r + 1 < kRecs)
                    load_block<kFormat, kWideScale>(st0 + (r + 1) * kRec + w_off, st0 + (r + 1) * kRec + s_off, words[r + 1],
                                                    m[r + 1]);
                wgmma::commit();
                wgmma::wait<kBufs - 1>();
            }
        }
        ring_advance(ws, wph, kStages);
        ring_advance(xs, xph, kXS);
        wp = ring_next(wp, kStages);
        xp = ring_next(xp, kXS);
        if constexpr (kNsb > 1) {
            if (++kq == nst) {  // super-block done: drain, store, start the next one from zero
                kq = 0;
                wgmma::wait<0>();
                wgmma::fence_acc(acc);
                store_block(sbi++);
                wgmma::fence();
            }
        }
    };
    if constexpr (kBufs == 3) {
        int i = 0;
#pragma unroll 1
        for (; i + 3 <= total; i += 3) {
            step(i, IntTag<0>{});
            step(i + 1, IntTag<2>{});
            step(i + 2, IntTag<1>{});
        }
        if (i < total) step(i, IntTag<0>{});
        if (i + 1 < total) step(i + 1, IntTag<2>{});
    } else {
#pragma unroll 1
        for (int i = 0; i < total; ++i) step(i, IntTag<0>{});
    }
    if constexpr (kNsb == 1) {
        if (live) {
            wgmma::wait<0>();
            wgmma::fence_acc(acc);
            store_block(sb0 + sub);
        }
    }
}

}  // namespace moe
}  // namespace kiln_dev
