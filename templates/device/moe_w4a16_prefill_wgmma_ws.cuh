// moe_w4a16 prefill gate_up and down (rows) for large m-blocks (128 or 192 routed rows: TP-sliced
// prefill, ~100-200 rows per expert), warpgroup MMA with warp specialisation (sm_90a only). With block_m
// 64 an expert of 171 rows takes three m-blocks, so its weights are dequantised three times and every
// m-block's token tile is read once per super-block; here one m-block covers the expert and wgmma runs
// with N up to 192.
//
// CTA: two consumer warpgroups (warps 0-7: warp w dequantises row-block w of the 128-row super-block
// into the register A operand of wgmma.mma_async.m64nNk16, as in moe_w4a16_prefill_wgmma) and a
// producer warpgroup (warps 8-11: the gathered token rows with cp.async, one bulk copy per weight record;
// setmaxnreg moves its registers to the consumers, 40 against 232). One CTA per SM (a 64-wide record of
// tokens is kBM x 128 bytes). No CTA barrier in the main loop: a ring of kSlots records, each slot with
// a "full" mbarrier (the weight record's bytes plus one arrival per producer thread once its token
// copies landed) and an "empty" one (one arrival per consumer warp once the wgmma group that read the
// slot has retired).
//
// Consumers: record i dequantises into A buffer i % 3 while the groups of records i - 1 and i - 2 are
// still in flight (the loop is unrolled by three so the buffers are distinct registers); wait_group 2
// after each commit retires record i - 2, whose slot is then released. N = 16 x ceil(rows / 16) per
// m-block (warpgroup-uniform: a switch around the record's four wgmmas).
//
// kRes > 0 (short K): the m-block's whole token tile, kRes records, is loaded once into its own region
// and the ring carries weight records only; a CTA walks kNsb super-blocks one after another
// (accumulators restart with scale-d 0; one super-block's epilogue overlaps the producers' loads for
// the next). kRes = 0: every slot holds one record of tokens and one of weights.
//
// Epilogues. gate_up (kMode 0): prefill_store_tile, as moe_w4a16_prefill_wgmma, but the intermediate
// row is multiplied by its router weight in fp32 before its one bf16 rounding (the weight goes in here,
// once per intermediate element, and not in down's epilogue, once per output element: there its loads
// and multiplies held both warpgroups while the tensor core idled). down (kMode 2, rows): the
// accumulators hold [channel][token]; each warpgroup transposes its 64 channels x kBM tokens with
// stmatrix.trans (one bf16 rounding) into a staging tile laid out as one
// tile of the tiled rows (moe_w4a16_combine.cuh: kBM rows x 64 columns, 16-byte chunks swizzled by the
// row, so the stmatrix rows fall in distinct banks), and one thread sends the m-block's valid rows with a
// single bulk copy that drains while the warpgroup computes the next super-block. Stores from the
// threads (16 bytes, 128 contiguous per row, rows at their slots) held the warpgroups a third of their
// time; one bulk copy per 128-byte row was slower still (the copy engine's rate for small copies).
//
// Parameters: as moe_w4a16_prefill_wgmma; m-block mb's sorted rows are mb x kBM .. mb x kBM + kBM - 1.
// down reads those rows of the intermediate and writes them as tiles (mb, 64-column group) of out.
#pragma once

#include "device/moe_w4a16_prefill_wgmma.cuh"

namespace kiln_dev {
namespace moe {

constexpr int kWsConsumerThreads = 256;
constexpr int kWsProducerThreads = 128;
constexpr int kWsThreads = kWsConsumerThreads + kWsProducerThreads;
constexpr int kWsSmemLimit = 232448;


// Shared memory: [token records (kRes of them, or one per slot) | kSlots weight records | down: two
// staging tiles (one per warpgroup); gate_up: the m-block's router weights (kBM floats) | mbarriers
// (full per slot, empty per slot, one per resident record)].
template <int kFormat, int kBM, int kRes>
struct PrefillWsSmem {
    using LB = LayoutBytes<kFormat, kDecodeBlocks>;
    static constexpr int kRec = LB::kRecordBytes;
    static constexpr int kXRec = kBM * 128;  // one 64-wide record of kBM token rows, 128-byte swizzle
    static constexpr int kTile = kBM * 128;  // down: one warpgroup's staging tile, kBM rows x 64 bf16
};

template <int kFormat, int kBM, int kRes, int kMode = 0>
__host__ __device__ constexpr int prefill_ws_smem_bytes(int slots) {
    using SM = PrefillWsSmem<kFormat, kBM, kRes>;
    return (kRes > 0 ? kRes : slots) * SM::kXRec + slots * SM::kRec + (kMode == 2 ? 2 * SM::kTile : kBM * 4) +
           ((8 * (2 * slots + (kRes > 0 ? kRes : 1)) + 127) / 128) * 128;
}

template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kBM, int kSlots, int kRes, int kNsb>
__global__ void __launch_bounds__(kWsThreads, 1) moe_w4a16_prefill_wgmma_ws(const DecodeParams p) {
    static_assert(kBM == 128 || kBM == 192, "m-blocks of 128 or 192 rows");
    static_assert(kMode == 0 || kMode == 2, "gate_up or down rows");
    static_assert(kSlots >= 2 && kNsb >= 1 && kNsb <= 16 && kRes >= 0, "ring and walk");
    static_assert(prefill_ws_smem_bytes<kFormat, kBM, kRes, kMode>(kSlots) <= kWsSmemLimit, "shared memory");
    using SM = PrefillWsSmem<kFormat, kBM, kRes>;
    using LB = typename SM::LB;
    constexpr int kRec = SM::kRec;
    constexpr int kXRec = SM::kXRec;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    constexpr int kWB = LB::kWeightBytes;
    constexpr int kTiles = kBM / 8;  // token tiles of 8 per m-block
    constexpr int kRows = kBM / 16;  // token rows per producer thread
    // wgmma groups a consumer warpgroup keeps in flight (2 is faster than 1 on the TP-sliced gate_up; 3 and
    // 4 measure the same as 2)
    constexpr int kInFlight = 2;
    constexpr int kStagger = 2;  // records between the two consumer warpgroups when a CTA walks super-blocks

    extern __shared__ __align__(1024) unsigned char smem_ws[];

    const int tid = threadIdx.x;
    // warp-uniform to the compiler (a plain tid >> 5 makes ptxas treat the role branch as divergent and
    // serialise every wgmma, advisory C7518)
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0), lane = tid & 31;

    const int nsb = p.n_pad >> 7;
    const int ncol = (nsb + kNsb - 1) / kNsb;
    const int mb = static_cast<int>(blockIdx.x) / ncol;
    const int sb0 = (static_cast<int>(blockIdx.x) - mb * ncol) * kNsb;
    if (mb >= *p.num_mblocks) return;
    const int nq = p.k_pad >> 6;                     // records per super-block
    const int total = min(kNsb, nsb - sb0) * nq;     // records of this CTA
    const int2 info = __ldg(p.mblock_info + mb);
    const int valid = info.y;

    const u32 sbase = smem_addr(smem_ws);
    if ((sbase & 1023u) != 0) __trap();  // the swizzled token atoms need 1024-byte alignment
    const u32 wbase = sbase + (kRes > 0 ? kRes : kSlots) * kXRec;
    const u32 stg = wbase + kSlots * kRec;  // down: staging tiles; gate_up: the m-block's router weights
    const u32 full = stg + (kMode == 2 ? 2 * SM::kTile : kBM * 4);
    const u32 empty = full + 8 * kSlots;
    const u32 xbar = empty + 8 * kSlots;  // kRes > 0: one per resident record
    if (tid == 0) {
        for (int s = 0; s < kSlots; ++s) {
            mbar_init(full + 8 * s, kRes > 0 ? 1 : 1 + kWsProducerThreads);
            mbar_init(empty + 8 * s, kWsConsumerThreads / 32);
        }
        for (int q = 0; q < (kRes > 0 ? kRes : 1); ++q) mbar_init(xbar + 8 * q, kWsProducerThreads);
        fence_mbar_init();
    }
    __syncthreads();
    // The super-blocks of an expert are contiguous in the layout: record i of this CTA is record i from sb0.
    const u8* wrec = p.weights + static_cast<u64>(info.x) * p.expert_stride + static_cast<u64>(sb0) * nq * kRec;

    if (warp >= kWsConsumerThreads / 32) {
        // ---- producers (one warpgroup, registers handed to the consumers): thread pt copies 16-byte chunk
        // c of rows r8 + 8 (2 j + h) (j < kRows) of each record, in the K-major 128-byte-swizzled layout
        // (chunk c of row r at chunk c ^ (r % 8); r % 8 = r8 here).
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        const int pt = tid - kWsConsumerThreads;
        const int c = pt & 7, r8 = (pt >> 3) & 7, h = pt >> 6;
        u32 xo[kRows];  // element offset of the row's chunk in x, or ~0 for rows past the m-block's count
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
            const int row = r8 + 8 * (2 * j + h);
            xo[j] = ~0u;
            if (row < valid) {
                const int sr = kMode == 0 ? __ldg(p.sorted_token + mb * kBM + row) : mb * kBM + row;
                xo[j] = static_cast<u32>(sr) * static_cast<u32>(p.x_stride) + c * 8;
            }
        }
        const u32 dst0 = h * 1024 + r8 * 128 + ((c ^ r8) << 4);
        auto copy_x = [&](int q, u32 dst) {  // record q (K offset 64 q) of the token rows
            // the record's base once, so that each copy adds only its row's 32-bit offset (the empty asm
            // keeps the compiler from folding q back into every row's 64-bit address)
            u64 xb = reinterpret_cast<u64>(p.x) + static_cast<u64>(q) * 128u;
            asm volatile("" : "+l"(xb));
            const __nv_bfloat16* xq = reinterpret_cast<const __nv_bfloat16*>(xb);
#pragma unroll
            for (int j = 0; j < kRows; ++j) {
                if (xo[j] != ~0u) {
                    int bytes = 16;
                    if constexpr (kMaskK) bytes = max(0, min(16, (p.k_real - (q * 64 + c * 8)) * 2));
                    cp_async16(dst + j * 2048, bytes ? static_cast<const void*>(xq + xo[j]) : static_cast<const void*>(p.x),
                               bytes);
                }
            }
        };
        if constexpr (kRes > 0) {
#pragma unroll 1
            for (int q = 0; q < kRes; ++q) {
                copy_x(q, sbase + q * kXRec + dst0);
                cp_async_mbar_arrive(xbar + 8 * q);  // the consumers start on record 0 while the rest lands
            }
        }
        int s = 0;
        u32 ph = 0;
        int q = 0;
#pragma unroll 1
        for (int i = 0; i < total; ++i) {
            if (i >= kSlots) mbar_wait(empty + 8 * s, ph ^ 1u);
            if (pt == 0) {
                mbar_arrive_expect_tx(full + 8 * s, kRec);
                bulk_g2s(wbase + s * kRec, wrec + static_cast<u64>(i) * kRec, kRec, full + 8 * s);
            }
            if constexpr (kRes == 0) {
                copy_x(q, sbase + s * kXRec + dst0);
                cp_async_mbar_arrive(full + 8 * s);
            }
            if (++q == nq) q = 0;
            ring_advance(s, ph, kSlots);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }

    // ---- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int g = lane >> 2, t = lane & 3;
    const int ntiles = (valid + 7) >> 3;
    const int nsel = (ntiles + 1) >> 1;  // wgmma N = 16 nsel
    const u32 w_off = warp * 512 + lane * 16;
    const u32 s_off = kWB + warp * kScB + g * (kFormat == kFormatInt4 ? 8 : 4);
    const u64 desc_x = wgmma::desc_sw128(sbase);
    const int odd = g & 1;

    float acc[kBM / 2];
#pragma unroll
    for (int i = 0; i < kBM / 2; ++i) acc[i] = 0.0f;
    const int v = warp >> 2;  // consumer warpgroup
    if constexpr (kMode == 0) {
        // the m-block's router weights (0 past `valid`), read by the epilogue; the load overlaps the first records
        float* w = reinterpret_cast<float*>(smem_ws + (stg - sbase));
        for (int r = tid; r < kBM; r += kWsConsumerThreads) w[r] = r < valid ? __ldg(p.sorted_weight + mb * kBM + r) : 0.0f;
        named_barrier(1, kWsConsumerThreads);
    }
    // down: stmatrix lane address (matrix i = lane / 8: token tile j + i / 2, channel chunk 2 (warp % 4) + i % 2
    // of the warpgroup's 8; row lane % 8 = token), chunks swizzled by the row (rows_tiled_offset's layout)
    const u32 tile = stg + v * SM::kTile;
    const u32 st_lane = tile + ((lane >> 4) * 8 + (lane & 7)) * 128 + ((((warp & 3) * 2 + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
    const bool leader = (tid & 127) == 0;
    auto store_rows = [&](int sb) {
        // the bulk copy of the last super-block has read the staging tile
        if (leader) bulk_wait_read<0>();
        named_barrier(2 + v, 128);
#pragma unroll
        for (int j = 0; j < kTiles; j += 2) {
            if (j >= ntiles) continue;
            const u32 r0 = pack_bf16x2(acc[4 * j], acc[4 * j + 1]);
            const u32 r1 = pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]);
            const u32 r2 = pack_bf16x2(acc[4 * j + 4], acc[4 * j + 5]);
            const u32 r3 = pack_bf16x2(acc[4 * j + 6], acc[4 * j + 7]);
            // (no memory clobber: the fence and the barrier below order the staging writes against the copy)
            asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(st_lane + j * 8 * 128),
                         "r"(r0), "r"(r1), "r"(r2), "r"(r3));
        }
        fence_proxy_async();  // the staging writes, visible to the bulk copy
        named_barrier(2 + v, 128);
        if (leader) {
            // the m-block's valid rows of these 64 channels are one contiguous tile of the rows: one copy,
            // drained while the warpgroup goes on to the next super-block
            bulk_s2g(p.out + (static_cast<long long>(mb) * (p.n_pad >> 6) + 2 * sb + v) * kBM * 64, tile, valid * 128);
            bulk_commit();
        }
    };
    auto store_block = [&](int sb) {
        if constexpr (kMode == 2) {
            store_rows(sb);
            return;
        }
        // recomputed per super-block: addresses hoisted out of the main loop would hold registers the
        // accumulators need (spills)
        long long row0 = static_cast<long long>(mb) * kBM;
        asm volatile("" : "+l"(row0));
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
            if (j >= ntiles) continue;
            const int r = 8 * j + 2 * t + odd;
            const long long pos = row0 + r;
            const float2 wt2 = *reinterpret_cast<const float2*>(smem_ws + (stg - sbase) + 4 * (8 * j + 2 * t));
            prefill_store_tile<0, kAct, true>(p, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3], g, r, pos,
                                              8 * sb + warp, valid, 0.0f, wt2);
        }
    };

    int s = 0;
    u32 ph = 0;
    // slots of the last kInFlight committed groups, not yet released (held[0] the oldest)
    int held[kInFlight];
#pragma unroll
    for (int h = 0; h < kInFlight; ++h) held[h] = -1;
    u32 a[kInFlight + 1][4][4];
    auto record = [&](u32(&ar)[4][4], int q) {
        if constexpr (kRes > 0) mbar_wait(xbar + 8 * q, 0);  // (completed once: returns at once after that)
        mbar_wait(full + 8 * s, ph);
        const u32 w = wbase + s * kRec;
        u32 words[4], m[4];
        load_block<kFormat, kWideScale>(w + w_off, w + s_off, words, m);
#pragma unroll
        for (int k = 0; k < 4; ++k) dequant_word<kFormat, kWideScale>(words[k], m[(k >> 1) * 2], m[(k >> 1) * 2 + 1], ar[k]);
        const u64 desc = desc_x + (static_cast<u32>((kRes > 0 ? q : s) * kXRec) >> 4);
        const bool first = q == 0;
        wgmma::fence();
        // commit in each case: after the switch, ptxas issues an empty wgmma to carry the commit
        switch (nsel) {
            case 1: prefill_record_mma<16>(acc, ar, desc, first); wgmma::commit(); break;
            case 2: prefill_record_mma<32>(acc, ar, desc, first); wgmma::commit(); break;
            case 3: prefill_record_mma<48>(acc, ar, desc, first); wgmma::commit(); break;
            case 4: prefill_record_mma<64>(acc, ar, desc, first); wgmma::commit(); break;
            case 5: prefill_record_mma<80>(acc, ar, desc, first); wgmma::commit(); break;
            case 6: prefill_record_mma<96>(acc, ar, desc, first); wgmma::commit(); break;
            case 7: prefill_record_mma<112>(acc, ar, desc, first); wgmma::commit(); break;
            case 8: prefill_record_mma<128>(acc, ar, desc, first); wgmma::commit(); break;
            case 9: prefill_record_mma<(kBM > 128 ? 144 : 128)>(acc, ar, desc, first); wgmma::commit(); break;
            case 10: prefill_record_mma<(kBM > 128 ? 160 : 128)>(acc, ar, desc, first); wgmma::commit(); break;
            case 11: prefill_record_mma<(kBM > 128 ? 176 : 128)>(acc, ar, desc, first); wgmma::commit(); break;
            default: prefill_record_mma<kBM>(acc, ar, desc, first); wgmma::commit(); break;
        }
        wgmma::wait<kInFlight>();  // retires the record kInFlight back: its slot goes back to the producers
        if (held[0] >= 0 && lane == 0) mbar_arrive(empty + 8 * held[0]);
#pragma unroll
        for (int h = 0; h + 1 < kInFlight; ++h) held[h] = held[h + 1];
        held[kInFlight - 1] = s;
        ring_advance(s, ph, kSlots);
    };
    // Several super-blocks per CTA: warpgroup 1 starts kStagger records after warpgroup 0 and keeps that
    // offset, so that one drains and stores a super-block while the other still issues wgmmas.
    constexpr bool kStaggered = kNsb > 1;
    const int stagger_at = kStaggered && v == 0 ? min(kStagger, nq) - 1 : -1;
    if (kStaggered && v == 1) named_barrier(4, kWsConsumerThreads);
#pragma unroll 1
    for (int sb = sb0; sb < sb0 + total / nq; ++sb) {
        // kInFlight + 1 A buffers (distinct registers: the loop is unrolled by that), kInFlight groups in flight
#pragma unroll 1
        for (int q = 0; q < nq; q += kInFlight + 1) {
#pragma unroll
            for (int b = 0; b <= kInFlight; ++b) {
                if (b == 0 || q + b < nq) record(a[b], q + b);
                if (kStaggered && sb == sb0 && q + b == stagger_at) named_barrier_arrive(4, kWsConsumerThreads);
            }
        }
        // super-block done: drain, store; the next one starts from zero (scale-d 0)
        wgmma::wait<0>();
#pragma unroll
        for (int h = 0; h < kInFlight; ++h) {
            if (held[h] >= 0 && lane == 0) mbar_arrive(empty + 8 * held[h]);
            held[h] = -1;
        }
        wgmma::fence_acc(acc);
        store_block(sb);
    }
    if constexpr (kMode == 2) {
        if (leader) bulk_wait<0>();  // the rows have been written before the CTA ends
    }
}

}  // namespace moe
}  // namespace kiln_dev
