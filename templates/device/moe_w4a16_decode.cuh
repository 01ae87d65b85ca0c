// moe_w4a16 decode GEMM (indexed mode, sm_90): swapped operands, dequantised weights on MMA-M and
// tokens on MMA-N (mma.sync m16n8k16), m-blocks of 8 * kTiles routed rows. Reads the decode_mma16
// layout (128-row super-blocks).
//
// One persistent CTA per SM, 640 threads = 4 groups x (4 consumer warps + 1 producer warp): warps 0-15
// are the consumers (group = warp / 4), warps 16-19 the producers of groups 0-3. Work items are
// (m-block, 128-row super-block[, K chunk]); each consumer warp owns two 16-row blocks of an item over
// the item's K range (the token fragments it loads feed both). Each group has a ring of kStages stages
// (64 * kRecs inputs each) with two mbarriers per stage:
//   full[s]  33 arrivals: the 32 producer lanes' cp.async arrivals (gathered token rows, zero-filled
//            past K, rows past the m-block's count not copied) plus the producer's arrive.expect_tx
//            for the stage's one bulk async copy of weight records (scales included);
//   empty[s] 4 arrivals: one per consumer warp once it has read the stage.
// The producer walks its items, waits for a free slot, writes the stage header, copies, and ends with
// a sentinel stage (valid rows -1). Consumers meet no group barrier in the main loop: a warp waits
// only for its next stage's data, so warps drift freely by up to kStages stages (measurably faster than
// the same math behind a per-stage group barrier: docs/perf/moe_w4a16.md). Token tiles after the first are
// skipped when the m-block has fewer rows (semi-static tiling); their MMA columns are never stored.
//
// Schedules (kSched):
//   0 static:  the list of 16-row row-blocks over all m-blocks is cut into equal contiguous shares,
//              one per CTA (equal weight bytes per SM); the four producers take the share's items
//              round-robin. Whole K per item.
//   1 dynamic: producers claim items with one atomic each (work[0]) in the order given by
//              order_window, one claim ahead. gate_up and down combined (kModes 0, 1) may cut K into
//              chunks of k_chunk records so that small problems have an item for every group: down
//              adds its partial sums into the fp32 accumulator anyway; gate_up adds them into
//              split_acc and the warp completing an item's last chunk applies the GLU. The last
//              producer to finish re-zeroes work[].
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
// kMode 3 (fused, moe_w4a16_decode_fused): kMode 0 items, then kMode 2 items, in one launch (below).
//
// Every kernel here starts with griddepcontrol.wait: the host launches them as programmatic dependents
// of the previous kernel (the routing kernel, gate_up, or whatever produced the fused kernel's top-k
// ids), so their launch overlaps it.
//
// Stage header (32 bytes): mb, valid rows (-1: sentinel), super-block, K chunk, active row-block mask,
// stages in this item, item kind (0 gate_up-like, 1 down in the fused mode), the item's claim id (fused:
// gate_up items m-block major, then down items).
#pragma once

#include "device/moe_w4a16_common.cuh"
#include "common/moe_w4a16_decode_fused_params.h"

namespace kiln_dev {
namespace moe {

using kiln_params::moe::DecodeParams;
using kiln_params::moe::FusedDecodeParams;

constexpr int kDecodeThreads = 640;  // 4 groups x (4 consumer warps + 1 producer warp)
constexpr int kDecodeBlocks = 8;     // row-blocks per super-block (decode_mma16)

template <int kFormat, int kTiles, int kRecs>
struct DecodeSmem {
    using LB = LayoutBytes<kFormat, kDecodeBlocks>;
    static constexpr int kRec = LB::kRecordBytes;
    static constexpr int kXStride = 128 * kRecs + 16;
    static constexpr int kOffX = kRecs * kRec;
    static constexpr int kOffMeta = kOffX + 8 * kTiles * kXStride;
    static constexpr int kStage = ((kOffMeta + 32) + 127) / 128 * 128;
};

template <int kFormat, int kTiles, int kRecs>
__host__ __device__ constexpr int decode_group_smem(int stages) {
    return stages * DecodeSmem<kFormat, kTiles, kRecs>::kStage + ((16 * stages + 127) / 128) * 128;
}
template <int kFormat, int kTiles, int kRecs>
__host__ __device__ constexpr int decode_smem_bytes(int stages) {
    return 4 * decode_group_smem<kFormat, kTiles, kRecs>(stages);
}
// Deepest ring (at most 8 stages) that fits the 227 KB of shared memory of one CTA.
template <int kFormat, int kTiles, int kRecs>
__host__ __device__ constexpr int decode_default_stages() {
    int s = 8;
    while (s > 2 && decode_smem_bytes<kFormat, kTiles, kRecs>(s) > 232448) --s;
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

// kMode 3 (fused, moe_w4a16_decode_fused; dynamic schedule only): the whole decode call in one
// persistent launch. Every CTA first computes the routing of the call into its shared memory (the same
// result everywhere: m-blocks in expert order, each expert's rows in slot order), so no routing kernel
// runs before it. Then every gate_up item (params `gate_up`, as kMode 0), then every down item (params
// `down`, as kMode 2, but each router-weighted row goes to row `slot` of down.out); claims are m-block
// major, and the producer of a down item first waits until the four consumer warps of every gate_up
// item of its m-block have stored their part of the intermediate (gu_done[mb], release / acquire), so
// the down items fill the gate_up tail. All CTAs are resident (one per SM) and gate_up items never
// wait, so the wait always ends. Last, every warp (producers after their ring, consumers after the
// sentinel) takes its share of the combine: it waits until every down item part is stored (dn_done),
// then sums the rows of its tokens' local slots in slot order (fp32, one bf16 rounding, deterministic)
// into `out`; a token with no local slot gets zeros.
// k_groups (1, 2 or 4): warp groups that share each item. With G > 1 the CTA's four groups form teams
// of G; a team's first producer claims the items and hands each id to the others (a named barrier per
// team), and group r of the team streams the r-th of G contiguous parts of the item's K stages, so an
// item ends G times sooner on the same four groups. At the item's end the consumer warps of groups
// 1..G-1 leave their fp32 partial sums in shared memory (named barrier "ready" per team), and the warp
// of group 0 holding the same rows adds them in group order (the bits do not depend on timing), then
// stores the rows and publishes them; it releases the buffer through a second barrier ("free"), which
// the other warps wait on before their next item's partials. Every part holds at least one stage.
// trace (optional, measurement): the globaltimer when each item's first consumer warp finishes it, by
// claim id (gate_up items, then down items), then per CTA the time it passes griddepcontrol.wait, the
// end of its routing and its last warp's end.

constexpr int kFusedWarps = kDecodeThreads / 32;
constexpr int kCombineUnits = 2;  // combine: units (8-column chunks of one token) per lane and pass

__host__ __device__ constexpr int align16(int b) { return (b + 15) / 16 * 16; }
// Shared memory of the fused kernel past its ring: m-block descriptors (int2), the slot of every
// sorted row (u16), then the combine's two wait flags and its finished-warp count. The host mirrors both sizes
// (jit/families/moe_w4a16_decode_fused.cpp).
__host__ __device__ constexpr int fused_route_area_bytes(int cap, int block_m) {
    return align16(cap * 8 + cap * block_m * 2) + 16;
}
__device__ __forceinline__ int* fused_flags(unsigned char* smem, int ring, int cap, int block_m) {
    return reinterpret_cast<int*>(smem + ring + align16(cap * 8 + cap * block_m * 2));
}
// Shared memory of the fused kernel past its routing area when k_groups > 1: the teams' claim slots
// (two per team), then the partial sums of the warps of groups 1..G-1, 1 KB per token tile each.
__host__ __device__ constexpr int fused_team_area_bytes(int k_groups, int tiles) {
    return k_groups > 1 ? 16 + (4 - 4 / k_groups) * 4 * tiles * 1024 : 0;
}
// Scratch while routing, inside the ring's bytes: expert of each slot (i16), rank of each slot among
// its warp's slots of that expert (u16), per warp and expert counts then offsets (u16), per expert
// the count then the first m-block (i32), 33 scan words.
__host__ __device__ constexpr int fused_route_scratch_bytes(int slots, int experts) {
    return 2 * align16(2 * slots) + align16(2 * kFusedWarps * experts) + align16(4 * experts) + 4 * 33;
}

// The routing of a fused call, computed by all threads of a CTA into `area` (after `ring` bytes of
// dynamic shared memory); the scratch lives at the start of the ring. Returns the m-block count.
template <int kBM>
__device__ int fused_route(const FusedDecodeParams& fp, int slots, unsigned char* smem, int ring) {
    const int E = fp.num_experts;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    short* const sid16 = reinterpret_cast<short*>(smem);
    unsigned short* const lrank = reinterpret_cast<unsigned short*>(smem + align16(2 * slots));
    unsigned short* const wcnt = reinterpret_cast<unsigned short*>(smem + 2 * align16(2 * slots));
    i32* const off = reinterpret_cast<i32*>(smem + 2 * align16(2 * slots) + align16(2 * kFusedWarps * E));
    i32* const wtot = off + align16(4 * E) / 4;
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (ring + fused_route_area_bytes(fp.mblock_cap, kBM) > static_cast<int>(dyn) ||
        fused_route_scratch_bytes(slots, E) > ring || fp.topk > 32 || slots > 65535)
        __trap();  // the host sizes the launch (MoeW4A16Family::fused_call_smem)
    int2* const info = reinterpret_cast<int2*>(smem + ring);
    unsigned short* const sorted = reinterpret_cast<unsigned short*>(smem + ring + fp.mblock_cap * 8);

    for (int i = tid; i < align16(2 * kFusedWarps * E) / 4; i += kDecodeThreads) reinterpret_cast<u32*>(wcnt)[i] = 0;
    // Eight loads in flight per thread: one global round trip for up to 5,120 slots.
    for (int s0 = tid; s0 < slots; s0 += 8 * kDecodeThreads) {
        int e[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int s = s0 + j * kDecodeThreads;
            e[j] = s < slots ? __ldg(fp.topk_ids + s) : -1;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int s = s0 + j * kDecodeThreads;
            if (s < slots) sid16[s] = static_cast<unsigned>(e[j]) < static_cast<unsigned>(E) ? e[j] : -1;
        }
    }
    __syncthreads();
    // Rank of each slot among the earlier slots of the same expert in its warp's contiguous range.
    const int per = ((slots + kFusedWarps - 1) / kFusedWarps + 31) / 32 * 32;
    unsigned short* const wc = wcnt + warp * E;
    const int s_end = min(slots, (warp + 1) * per);
    for (int b = warp * per; b < s_end; b += 32) {
        const int s = b + lane;
        const int e = s < s_end ? sid16[s] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        const unsigned before = peers & ((1u << lane) - 1u);
        const int base = e >= 0 ? wc[e] : 0;
        __syncwarp();
        if (e >= 0) {
            lrank[s] = static_cast<unsigned short>(base + __popc(before));
            if (before == 0) wc[e] = static_cast<unsigned short>(base + __popc(peers));
        }
        __syncwarp();
    }
    __syncthreads();
    // Per expert (each thread a contiguous run of experts): the warps' first ranks and the count, then
    // an exclusive scan of the m-blocks per expert over the CTA.
    const int eper = (E + kDecodeThreads - 1) / kDecodeThreads;
    const int e0 = min(E, tid * eper), e1 = min(E, e0 + eper);
    int local = 0;
    for (int e = e0; e < e1; ++e) {
        int run = 0;
        for (int w = 0; w < kFusedWarps; ++w) {
            const int c = wcnt[w * E + e];
            wcnt[w * E + e] = static_cast<unsigned short>(run);
            run += c;
        }
        off[e] = run;
        local += (run + kBM - 1) / kBM;
    }
    int run = block_exclusive_scan(local, wtot);
    const int total = min(wtot[kFusedWarps], fp.mblock_cap);
    for (int e = e0; e < e1; ++e) {
        const int c = off[e];
        const int nb = (c + kBM - 1) / kBM;
        off[e] = run;
        for (int j = 0; j < nb && run + j < total; ++j) info[run + j] = make_int2(e, min(kBM, c - j * kBM));
        run += nb;
    }
    __syncthreads();
    for (int s = tid; s < slots; s += kDecodeThreads) {
        const int e = sid16[s];
        if (e < 0) continue;
        const int r = off[e] * kBM + wcnt[(s / per) * E + e] + lrank[s];
        if (r < total * kBM) sorted[r] = static_cast<unsigned short>(s);
    }
    if (tid == 0) {
        int* flags = fused_flags(smem, ring, fp.mblock_cap, kBM);
        flags[0] = flags[1] = flags[2] = 0;
    }
    __syncthreads();
    return total;
}

// The fused kernel's last phase, run by every warp once it has left the ring: the combine, then the
// finished count (the last warp out re-zeroes the counters). The combine's units (one token's 8-column
// chunk) are cut into one contiguous share per warp of the grid, lanes on consecutive chunks; each
// lane finds its units' local slots before the wait, so after it only the rows are read.
// trace (optional): each CTA's latest warp end into trace_end (atomicMax).
__device__ __forceinline__ void fused_combine(const FusedDecodeParams& fp, int nmb, int* flags, u64* trace_end) {
    const DecodeParams& pd = fp.down;
    i32* const work = fp.gate_up.work;
    const int lane = threadIdx.x & 31;
    const int topk = fp.topk, E = fp.num_experts, n = pd.n_real;
    const int nch = (n + 7) >> 3;
    const long long units = static_cast<long long>(fp.gate_up.num_tokens) * nch;
    const long long warps = static_cast<long long>(kFusedWarps) * gridDim.x;
    const long long per = (units + warps - 1) / warps;
    const long long wid = static_cast<long long>(blockIdx.x) * kFusedWarps + (threadIdx.x >> 5);
    const long long u0 = min(units, wid * per), u1 = min(units, u0 + per);
    const int want = 4 * nmb * (pd.n_pad >> 7);
    const bool vec = (n % 8) == 0 && (fp.out_stride % 8) == 0;
    // local slots of the units this lane takes in one pass (inputs only: read before the wait)
    auto find = [&](long long u, int& tok, int& col, u32& mask) {
        tok = -1;
        mask = 0;
        if (u >= u1) return;
        tok = static_cast<int>(u / nch);
        col = static_cast<int>(u - static_cast<long long>(tok) * nch) * 8;
        const i32* ids = fp.topk_ids + static_cast<long long>(tok) * topk;
        for (int j = 0; j < topk; ++j) {
            const int e = __ldg(ids + j);
            if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) mask |= 1u << j;
        }
    };
    int tok[kCombineUnits], col[kCombineUnits];
    u32 mask[kCombineUnits];
#pragma unroll
    for (int k = 0; k < kCombineUnits; ++k) find(u0 + k * 32 + lane, tok[k], col[k], mask[k]);

    // Wait until every down item part is stored. One warp per CTA at a time polls the global count
    // (flags[1]: the poller's lock) and raises flags[0] (release); every lane acquires flags[0], so the
    // rows stored by other CTAs are visible. Thousands of warps polling one global word would load the
    // L2 slice that holds it, which every weight stream crosses.
    if (u0 < u1) {
        const u32 go = smem_addr(flags), lock = go + 4;
        for (;;) {
            int v;
            asm volatile("ld.acquire.cta.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(go) : "memory");
            if (__any_sync(0xffffffffu, v != 0)) break;
            if (lane == 0) {
                int got;
                asm volatile("atom.shared.cas.b32 %0, [%1], 0, 1;\n" : "=r"(got) : "r"(lock) : "memory");
                if (got == 0) {
                    int d;
                    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(d) : "l"(fp.dn_done) : "memory");
                    if (d >= want) asm volatile("st.release.cta.shared.b32 [%0], 1;\n" ::"r"(go) : "memory");
                    asm volatile("st.relaxed.cta.shared.b32 [%0], 0;\n" ::"r"(lock) : "memory");
                }
            }
            __nanosleep(64);
        }
        for (;;) {  // each lane's own acquire of the raised flag
            int v;
            asm volatile("ld.acquire.cta.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(go) : "memory");
            if (v) break;
        }
    }
#pragma unroll 1
    for (long long ub = u0; ub < u1; ub += 32 * kCombineUnits) {
        if (ub != u0) {
#pragma unroll
            for (int k = 0; k < kCombineUnits; ++k) find(ub + k * 32 + lane, tok[k], col[k], mask[k]);
        }
        // up to four rows per unit in flight, summed in slot order
        float acc[kCombineUnits][8];
        u32 m[kCombineUnits];
#pragma unroll
        for (int k = 0; k < kCombineUnits; ++k) {
            m[k] = mask[k];
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[k][c] = 0.f;
        }
        for (;;) {
            u32 left = 0;
#pragma unroll
            for (int k = 0; k < kCombineUnits; ++k) left |= m[k];
            if (!__any_sync(0xffffffffu, left != 0)) break;
            uint4 v[kCombineUnits][4];
            bool have[kCombineUnits][4];
#pragma unroll
            for (int k = 0; k < kCombineUnits; ++k) {
                const __nv_bfloat16* base =
                    pd.out + static_cast<long long>(tok[k]) * topk * pd.out_stride + col[k];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    have[k][q] = m[k] != 0;
                    if (have[k][q]) {
                        const int j = __ffs(m[k]) - 1;
                        m[k] &= m[k] - 1;
                        v[k][q] = __ldcg(reinterpret_cast<const uint4*>(base + static_cast<long long>(j) * pd.out_stride));
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < kCombineUnits; ++k)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    if (!have[k][q]) continue;
                    const u32 w[4] = {v[k][q].x, v[k][q].y, v[k][q].z, v[k][q].w};
#pragma unroll
                    for (int h = 0; h < 4; ++h) {
                        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[h]));
                        acc[k][2 * h] += f.x;
                        acc[k][2 * h + 1] += f.y;
                    }
                }
        }
#pragma unroll
        for (int k = 0; k < kCombineUnits; ++k) {
            if (tok[k] < 0) continue;
            __nv_bfloat16* o = fp.out + static_cast<long long>(tok[k]) * fp.out_stride + col[k];
            if (vec) {
                *reinterpret_cast<uint4*>(o) =
                    make_uint4(pack_bf16x2(acc[k][0], acc[k][1]), pack_bf16x2(acc[k][2], acc[k][3]),
                               pack_bf16x2(acc[k][4], acc[k][5]), pack_bf16x2(acc[k][6], acc[k][7]));
            } else {
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    if (col[k] + c < n) o[c] = __float2bfloat16(acc[k][c]);
            }
        }
    }
    // Every claim and wait of this warp precedes its increment; the last warp out re-zeroes the counters.
    // The warps of a CTA count in shared memory (flags[2]) and the CTA's last one counts the CTA in
    // work[1]: the warps end together, and one global word taking every warp's atomic serialised them.
    if (lane == 0) {
        if (trace_end) atomicMax(reinterpret_cast<unsigned long long*>(trace_end), static_cast<unsigned long long>(globaltimer()));
        __threadfence();
        if (atomicAdd_block(flags + 2, 1) != kFusedWarps - 1) return;
        __threadfence();
        const int done = atomicAdd(work + 1, 1);
        if (done == static_cast<int>(gridDim.x) - 1) {
            for (int mb = 0; mb < nmb; ++mb) fp.gu_done[mb] = 0;
            *fp.dn_done = 0;
            atomicExch(work, 0);
            atomicExch(work + 1, 0);
        }
    }
}

// kRecs: 64-wide K records per pipeline stage (the host picks 2 when K_pad % 128 == 0, else 1; 4 on
// request).
// kSched: 0 static shares, 1 dynamic claiming. kSkipMath: measurement variant that streams the same
// bytes and skips dequantisation and MMAs.
template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kTiles, int kStages, int kRecs,
          int kSched, bool kSkipMath>
__device__ __forceinline__ void decode_gemm(const DecodeParams& p, const DecodeParams& p2,
                                            const FusedDecodeParams* fp = nullptr) {
    static_assert(kTiles >= 1 && kTiles <= 4, "1..4 token tiles of 8");
    static_assert(kStages >= 2, "at least two stages");
    static_assert(kRecs == 1 || kRecs == 2 || kRecs == 4, "one, two or four records per stage");
    static_assert(kMode >= 0 && kMode <= 3, "gate_up, down combined, down rows, fused");
    static_assert(kSched == 0 || kSched == 1, "static or dynamic schedule");
    static_assert(kMode != 3 || kSched == 1, "the fused mode claims dynamically");
    constexpr bool kFused = kMode == 3;
    using SM = DecodeSmem<kFormat, kTiles, kRecs>;
    using LB = typename SM::LB;
    constexpr int kBM = 8 * kTiles;
    constexpr int kRec = SM::kRec;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    constexpr int kWB = LB::kWeightBytes;
    constexpr int kRowChunks = 8 * kRecs;           // 16-byte chunks of one token row per stage
    constexpr int kCpl = kBM * kRowChunks / 32;     // chunks per producer lane per stage
    constexpr bool kDyn = kSched == 1;
    constexpr int kGroupSmem = decode_group_smem<kFormat, kTiles, kRecs>(kStages);

    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;

    griddep_wait();  // launched overlapping the routing (or gate_up) kernel: its outputs come first
    const int nq = p.k_pad >> 6;
    // fused: the routing in this CTA's shared memory, past the four groups' rings
    i32* const gu_done = kFused ? fp->gu_done : nullptr;
    u64* const trace = kFused ? fp->trace : nullptr;
    const int2* s_info = nullptr;
    const unsigned short* s_sorted = nullptr;
    int nmb;
    u64 t_start = 0;
    int first_claim = 0;  // fused: each claiming producer's first claim, in flight while the CTA routes
    // warp groups per item (fused; m-blocks of up to 16 rows: 32-row ones leave no room for the partial
    // sums, and the shared-item code would cost their consumers registers)
    const int kg = kFused && kTiles <= 2 ? fp->k_groups : 1;
    if constexpr (kFused) {
        if (trace) t_start = globaltimer();
        if (warp >= 16 && ((warp - 16) & (kg - 1)) == 0 && lane == 0) first_claim = atomicAdd(p.work, 1);
        nmb = fused_route<kBM>(*fp, p.num_tokens * fp->topk, smem_raw, 4 * kGroupSmem);
        s_info = reinterpret_cast<const int2*>(smem_raw + 4 * kGroupSmem);
        s_sorted = reinterpret_cast<const unsigned short*>(smem_raw + 4 * kGroupSmem + fp->mblock_cap * 8);
        if (blockIdx.x == 0 && threadIdx.x == 0 && fp->num_mblocks) *fp->num_mblocks = nmb;
        u32 dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if ((kg != 1 && kg != 2 && kg != 4) || kg != fp->k_groups || p.k_pad / (64 * kRecs) < kg ||
            p2.k_pad / (64 * kRecs) < kg ||
            4 * kGroupSmem + fused_route_area_bytes(fp->mblock_cap, kBM) + fused_team_area_bytes(kg, kTiles) >
                static_cast<int>(dyn))
            __trap();  // the host checks k_groups and sizes the launch (MoeW4A16Family::fused_call_smem)
    } else {
        nmb = *p.num_mblocks;
    }
    // fused: the down items' shape (p2); elsewhere unused
    const int nq2 = kFused ? p2.k_pad >> 6 : nq, nsb2 = kFused ? p2.n_pad >> 7 : 0;
    // trace: after the items, per CTA its start, the end of its routing, its last warp's end
    u64* trace_end = nullptr;
    if (kFused && trace) {
        u64* cta = trace + nmb * ((p.n_pad >> 7) + nsb2) + blockIdx.x;
        if (threadIdx.x == 0) {
            cta[0] = t_start;
            cta[gridDim.x] = globaltimer();
        }
        trace_end = cta + 2 * gridDim.x;
    }
    if (!kFused && nmb == 0) {
        if constexpr (kMode == 1) {
            const int total = p.num_tokens * p.n_real;
            for (int i = blockIdx.x * kDecodeThreads + tid; i < total; i += gridDim.x * kDecodeThreads)
                p.out[(i / p.n_real) * p.out_stride + i % p.n_real] = __float2bfloat16(0.0f);
        }
        return;
    }
    const int nb16 = p.n_pad >> 4, nsb = p.n_pad >> 7;

    // K chunks per item (dynamic schedule; the rows mode stores finished rows and never splits).
    int chunk = nq, ksplit = 1;
    if constexpr (kDyn && kMode < 2) {
        const int base = nmb * nsb;  // whole-K items of this call
        int want = 0;
        if (p.k_chunk > 0) {
            if (base <= p.split_max_items) want = p.k_chunk;
        } else if (p.k_chunk < 0 && base < p.split_max_items) {
            // automatic: enough chunks for split_max_items items, each at least -k_chunk records
            const int split = min((p.split_max_items + base - 1) / base, nq / max(-p.k_chunk, kRecs));
            if (split >= 2) want = (nq + split - 1) / split;
        }
        want = (want + kRecs - 1) / kRecs * kRecs;
        if (want > 0 && want < nq && (kMode == 1 || base <= p.split_cap)) {
            chunk = want;
            ksplit = (nq + chunk - 1) / chunk;
        }
    }

    // Static schedule: this CTA's share of row-blocks (CTA-uniform, so an empty share returns here).
    int r0 = 0, r1 = 0, gs0 = 0, n_items = 0;
    if constexpr (!kDyn) {
        const long long units = static_cast<long long>(nmb) * nb16;
        r0 = static_cast<int>(units * blockIdx.x / gridDim.x);
        r1 = static_cast<int>(units * (blockIdx.x + 1) / gridDim.x);
        if (r0 >= r1) return;
        gs0 = r0 >> 3;
        n_items = ((r1 - 1) >> 3) + 1 - gs0;
    }

    const bool is_producer = warp >= 16;
    const int gid = is_producer ? warp - 16 : warp >> 2;
    // fused, k_groups > 1: this group's team, its part of each item, the team's claim slots and partial sums
    const int team = gid / kg, part = gid - team * kg;
    unsigned char* const team_area =
        kFused ? smem_raw + 4 * kGroupSmem + fused_route_area_bytes(fp->mblock_cap, kBM) : nullptr;
    volatile int* const team_claim = reinterpret_cast<volatile int*>(team_area) + 2 * team;
    const u32 gsm = smem_addr(smem_raw) + gid * kGroupSmem;
    const u32 full = gsm + kStages * SM::kStage;
    const u32 empty = full + 8 * kStages;
    if (is_producer && lane == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            mbar_init(full + 8 * s, 33);
            mbar_init(empty + 8 * s, 4);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (is_producer) {
        // ---------------------------------------------------------------- producer warp of group gid
        const u64 policy = evict_first_policy();
        int i = 0;  // stages issued
        int next = 0;
        auto acquire = [&]() -> int {
            const int slot = i % kStages;
            if (i >= kStages) mbar_wait(empty + 8 * slot, ((i / kStages) - 1) & 1);
            return slot;
        };
        // One stage of item (mb, sb, kc) at record q0 .. q0 + kRecs - 1.
        auto produce = [&](const DecodeParams& pp, bool gu, int mb, int sb, int kc, int expert, int valid, int mask,
                           int nst, int q0, const int (&tok)[kCpl]) {
            const int slot = acquire();
            const u32 st = gsm + slot * SM::kStage;
            const u32 bar = full + 8 * slot;
            const int ntiles = (valid + 7) >> 3;
#pragma unroll
            for (int h = 0; h < kCpl; ++h) {
                const int c = lane + 32 * h;
                const int row = c / kRowChunks, kcol = c % kRowChunks;
                if ((row >> 3) < ntiles && row < valid) {
                    const int k = q0 * 64 + kcol * 8;
                    int bytes = 16;
                    if (kMaskK && gu) bytes = max(0, min(16, (pp.k_real - k) * 2));
                    const __nv_bfloat16* src;
                    if (gu)
                        src = pp.x + static_cast<long long>(tok[h]) * pp.x_stride + k;
                    else
                        src = pp.x + static_cast<long long>(mb * kBM + row) * pp.x_stride + k;
                    cp_async16(st + SM::kOffX + row * SM::kXStride + kcol * 16, bytes ? src : pp.x, bytes);
                }
            }
            if (lane == 0) {
                fence_proxy_async();  // the consumers' generic reads of this slot precede the bulk write
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta), "r"(mb), "r"(valid),
                             "r"(sb), "r"(kc)
                             : "memory");
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta + 16), "r"(mask),
                             "r"(nst), "r"(gu ? 0 : 1), "r"(gu ? mb * nsb + sb : nmb * nsb + mb * nsb2 + sb)
                             : "memory");
                const u8* rec = pp.weights + static_cast<u64>(expert) * pp.expert_stride +
                                static_cast<u64>(sb * (pp.k_pad >> 6) + q0) * kRec;
                if (mask == 0xFF) {
                    mbar_arrive_expect_tx(bar, kRecs * kRec);
                    bulk_g2s_hint(st, rec, kRecs * kRec, bar, policy);
                } else {
                    const int b0 = __ffs(mask) - 1, b1 = 32 - __clz(mask);
                    mbar_arrive_expect_tx(bar, kRecs * (b1 - b0) * (512 + kScB));
#pragma unroll
                    for (int j = 0; j < kRecs; ++j) {
                        bulk_g2s_hint(st + j * kRec + b0 * 512, rec + j * kRec + b0 * 512, (b1 - b0) * 512, bar, policy);
                        bulk_g2s_hint(st + j * kRec + kWB + b0 * kScB, rec + j * kRec + kWB + b0 * kScB,
                                      (b1 - b0) * kScB, bar, policy);
                    }
                }
            }
            cp_async_mbar_arrive(bar);
            ++i;
        };
        // down = true: an item of the down matrix (fused mode only; kModes 1 and 2 use p as the down).
        auto run_item = [&](int mb, int sb, int kc, int mask, bool down = false, int part_of = 0, int parts = 1) {
            const bool gu = kMode == 0 || (kFused && !down);
            const DecodeParams& pp = kFused && down ? p2 : p;
            const int2 info = kFused ? s_info[mb] : __ldg(p.mblock_info + mb);
            int tok[kCpl];
#pragma unroll
            for (int h = 0; h < kCpl; ++h) {
                tok[h] = 0;
                if (gu) {
                    const int row = (lane + 32 * h) / kRowChunks;
                    if (row < info.y)
                        tok[h] = kFused ? s_sorted[mb * kBM + row] / fp->topk : __ldg(p.sorted_token + mb * kBM + row);
                }
            }
            if (kFused && down) {  // the intermediate rows of this m-block must all be stored
                if (lane == 0) {
                    const int want = 4 * nsb;
                    for (;;) {
                        int v;
                        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(gu_done + mb) : "memory");
                        if (v >= want) break;
                        __nanosleep(200);
                    }
                }
                __syncwarp();
            }
            const int nqi = kFused && down ? nq2 : nq;
            const int q0 = kc * chunk;
            const int nst = (min(nqi, q0 + (kFused && down ? nq2 : chunk)) - q0) / kRecs;
            // k_groups > 1: this group's contiguous part of the item's stages
            const int s0 = nst * part_of / parts, s1 = nst * (part_of + 1) / parts;
#pragma unroll 1
            for (int s = s0; s < s1; ++s) produce(pp, gu, mb, sb, kc, info.x, info.y, mask, s1 - s0, q0 + s * kRecs, tok);
        };

        if constexpr (!kDyn) {
#pragma unroll 1
            for (int j = gid; j < n_items; j += 4) {
                const int G = gs0 + j;
                const int mb = G / nsb, sb = G - mb * nsb;
                const int lo = max(r0 - 8 * G, 0), hi = min(r1 - 8 * G, 8);
                run_item(mb, sb, 0, ((1 << hi) - 1) & ~((1 << lo) - 1));
            }
        } else if constexpr (kFused) {
            // every gate_up item (m-block major), then every down item (m-block major)
            const int n_gu = nmb * nsb, total = n_gu + nmb * nsb2;
            if (kg == 1) {
                next = first_claim;
                next = __shfl_sync(0xffffffffu, next, 0);
#pragma unroll 1
                while (next < total) {
                    const int id = next;
                    if (lane == 0) next = atomicAdd(p.work, 1);
                    if (id < n_gu) run_item(id / nsb, id % nsb, 0, 0xFF);
                    else run_item((id - n_gu) / nsb2, (id - n_gu) % nsb2, 0, 0xFF, true);
                    next = __shfl_sync(0xffffffffu, next, 0);
                }
            } else {
                // The team's first producer claims (one claim ahead) and hands each id over through a
                // claim slot; slot it & 1 is rewritten only after the next barrier, which every reader
                // of this one has passed.
                next = first_claim;
#pragma unroll 1
                for (int it = 0;; ++it) {
                    if (part == 0 && lane == 0) {
                        team_claim[it & 1] = next;
                        if (next < total) next = atomicAdd(p.work, 1);
                    }
                    named_barrier(5 + team, 32 * kg);
                    const int id = team_claim[it & 1];
                    if (id >= total) break;
                    if (id < n_gu) run_item(id / nsb, id % nsb, 0, 0xFF, false, part, kg);
                    else run_item((id - n_gu) / nsb2, (id - n_gu) % nsb2, 0, 0xFF, true, part, kg);
                }
            }
        } else {
            const int total = nmb * nsb * ksplit;
            const int win = min(max(p.order_window, 1), nmb);
            const int per_mb = nsb * ksplit;
            const int full_w = nmb / win, items_full = full_w * win * per_mb;
            int next = 0;
            if (lane == 0) next = atomicAdd(p.work, 1);
            next = __shfl_sync(0xffffffffu, next, 0);
#pragma unroll 1
            while (next < total) {
                const int id = next;
                if (lane == 0) next = atomicAdd(p.work, 1);  // one claim ahead: its latency hides behind the item
                int mb, rest;
                if (id < items_full) {
                    const int wi = id / (win * per_mb), rem = id - wi * win * per_mb;
                    mb = wi * win + rem % win;
                    rest = rem / win;
                } else {
                    const int wl = nmb - full_w * win, rem = id - items_full;
                    mb = full_w * win + rem % wl;
                    rest = rem / wl;
                }
                const int sb = rest / ksplit;
                run_item(mb, sb, rest - sb * ksplit, 0xFF);
                next = __shfl_sync(0xffffffffu, next, 0);
            }
        }
        // Sentinel: a stage with no data that tells the group's consumers to stop.
        {
            const int slot = acquire();
            const u32 st = gsm + slot * SM::kStage;
            const u32 bar = full + 8 * slot;
            if (lane == 0) {
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta), "r"(0), "r"(-1), "r"(0),
                             "r"(0)
                             : "memory");
                mbar_arrive_expect_tx(bar, 0);
            }
            cp_async_mbar_arrive(bar);
            ++i;
        }
        if constexpr (kDyn && !kFused) {
            // The last producer out re-zeroes the claim counters: every producer's claims precede its
            // increment of the finished count.
            if (lane == 0) {
                __threadfence();
                const int done = atomicAdd(p.work + 1, 1);
                if (done == 4 * static_cast<int>(gridDim.x) - 1) {
                    atomicExch(p.work, 0);
                    atomicExch(p.work + 1, 0);
                }
            }
        }
        // Producer tail: wait until the consumers have released every data stage still in the ring, so
        // no copy this warp issued is outstanding when it exits (the sentinel is never released).
#pragma unroll 1
        for (int j = max(0, i - kStages); j < i - 1; ++j) mbar_wait(empty + 8 * (j % kStages), (j / kStages) & 1);
        if constexpr (kFused) fused_combine(*fp, nmb, fused_flags(smem_raw, 4 * kGroupSmem, fp->mblock_cap, kBM), trace_end);
        return;
    }

    // -------------------------------------------------------------------- consumer warp wig of group gid
    const int wig = warp & 3;
    // Two accumulator sets (even / odd k16 steps) halve the dependent MMA chain per stage where the
    // registers allow; they are summed at the end of an item.
    constexpr bool kDual = kTiles <= 2;
    constexpr bool kTileDispatch = kFused && kTiles == 2 && kFormat == kFormatInt4 && !kMaskK;
    float acc[2][kTiles][4], acc2[2][kTiles][4];
    int c_mb = 0, c_valid = 0, c_ntiles = 0, c_sb = 0, c_act = 0, c_q = 0, c_nst = 1, c_claim = 0;
    bool c_gu = kMode == 0;  // the item is a gate_up item (fused: from the stage header)
    int e_tok[kTiles][2];
    float e_wt[kTiles][2];
    int pend_rb[2] = {-1, -1};
    int pend_prev[2] = {0, 0};
    bool pend_check = false;
    const int contributions = nmb * ksplit;
    const int lrow = lane & 7, lmat = lane >> 3;
    u32 w_off = (2 * wig) * 512 + lane * 16;
    u32 s_off = kWB + (2 * wig) * kScB + g * (kFormat == kFormatInt4 ? 8 : 4);
    u32 x_off = SM::kOffX + lrow * SM::kXStride + lmat * 16;
    // Opaque to the compiler, so that it keeps them in registers instead of recomputing them every stage.
    asm volatile("" : "+r"(w_off), "+r"(s_off), "+r"(x_off));

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

    int slot = 0;
    u32 phase = 0;
    int dn_parts = 0;  // fused: down item parts this warp has stored
    int team_items = 0;  // fused, k_groups > 1: items whose partial sums this warp has handed over or added
    // this warp's partial-sum buffer (groups 1..G-1) or the first of its team's (group 0): 2 x kTiles
    // float4 per lane, lanes innermost
    float4* const red = kFused && kg > 1
                            ? reinterpret_cast<float4*>(team_area + 16) +
                                  ((team * (kg - 1) + max(part - 1, 0)) * 4 + wig) * (2 * kTiles * 32) + lane
                            : nullptr;
#pragma unroll 1
    for (;;) {
        const u32 st = gsm + slot * SM::kStage;
        mbar_wait(full + 8 * slot, phase);
        if (c_q == 0) {
            const uint4 meta = lds128(st + SM::kOffMeta);
            c_valid = static_cast<int>(meta.y);
            if (c_valid < 0) break;
            const uint4 meta2 = lds128(st + SM::kOffMeta + 16);
            if constexpr (kFused) {
                c_gu = meta2.z == 0;
                c_claim = static_cast<int>(meta2.w);
            }
            c_mb = static_cast<int>(meta.x);
            c_sb = static_cast<int>(meta.z);
            c_act = (meta2.x >> (2 * wig)) & 3u;
            c_nst = static_cast<int>(meta2.y);
            c_ntiles = (c_valid + 7) >> 3;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int ti = 0; ti < kTiles; ++ti)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[h][ti][e] = acc2[h][ti][e] = 0.0f;
            if (!c_gu) {
#pragma unroll
                for (int ti = 0; ti < kTiles; ++ti)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int pos = c_mb * kBM + 8 * ti + 2 * t + e;
                        if constexpr (kFused) {
                            e_wt[ti][e] = 8 * ti + 2 * t + e < c_valid ? __ldg(fp->topk_weights + s_sorted[pos]) : 0.0f;
                        } else {
                            if constexpr (kMode == 1) e_tok[ti][e] = __ldg(p.sorted_token + pos);
                            e_wt[ti][e] = __ldg(p.sorted_weight + pos);
                        }
                    }
            }
            if constexpr (kMode == 1) {
                if (pend_rb[0] >= 0 || pend_rb[1] >= 0) bump_counters();
            }
        }
        if constexpr (kMode == 1) {
            if (c_q == c_nst - 1 && pend_check) finish_counters();
        }
        // The stage's math for the first NT token tiles; NT = 0: all kTiles tiles, the later ones predicated
        // (semi-static tiling). ptxas wraps each predicated mma.sync in WARPSYNCs (2.5 per weight word with
        // two tiles), so where kTileDispatch holds the tile count is dispatched once per stage instead, to a
        // copy without predicates (below; faster on the two-tile INT4 decode calls). Elsewhere the second copy
        // costs spills (MXFP4, the K mask, the unfused kernels), so they keep the predicates.
        auto stage_math = [&](auto nt) {
            constexpr int NT = decltype(nt)::value;
            constexpr int kUse = NT > 0 ? NT : kTiles;
            // the one-tile copy in a two-tile kernel runs its records as a loop: unrolled, it spills
#pragma unroll(NT == 1 && kTiles > 1 ? 1 : kRecs)
            for (int j = 0; j < kRecs; ++j) {
                const u32 rec = st + j * kRec;
                u32 words[2][4], m[2][4];
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    load_block<kFormat, kWideScale>(rec + w_off + h * 512, rec + s_off + h * kScB, words[h], m[h]);
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    u32 b[kTiles][4];
#pragma unroll
                    for (int ti = 0; ti < kUse; ++ti) {
                        if (NT > 0 || ti == 0 || ti < c_ntiles)
                            ldmatrix_x4(st + x_off + ti * (8 * SM::kXStride) + j * 128 + c * 64, b[ti][0], b[ti][1], b[ti][2],
                                        b[ti][3]);
                    }
#pragma unroll
                    for (int s2 = 0; s2 < 2; ++s2) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            u32 a[4];
                            dequant_word<kFormat, kWideScale>(words[h][2 * c + s2], m[h][2 * c], m[h][2 * c + 1], a);
#pragma unroll
                            for (int ti = 0; ti < kUse; ++ti) {
                                if (NT > 0 || ti == 0 || ti < c_ntiles)
                                    mma_bf16_16816(kDual && s2 ? acc2[h][ti] : acc[h][ti], a[0], a[1], a[2], a[3],
                                                   b[ti][2 * s2], b[ti][2 * s2 + 1]);
                            }
                        }
                    }
                }
            }
        };
        if (c_act && !kSkipMath) {
            if constexpr (kTiles == 1) {
                stage_math(IntTag<1>{});
            } else if constexpr (kTileDispatch) {
                if (c_ntiles >= kTiles) stage_math(IntTag<kTiles>{});
                else stage_math(IntTag<1>{});
            } else {
                stage_math(IntTag<0>{});
            }
        }
        // This warp is done reading the stage.
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * slot);
        if (++slot == kStages) {
            slot = 0;
            phase ^= 1u;
        }
        if (++c_q < c_nst) continue;
        c_q = 0;
        if (kFused && trace && part == 0 && wig == 0 && lane == 0) trace[c_claim] = globaltimer();
        if (!c_act) continue;
        if constexpr (kDual) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int ti = 0; ti < kTiles; ++ti)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[h][ti][e] += acc2[h][ti][e];
        }
        if (kFused && kg > 1) {
            // the team's partial sums meet in the warp of group 0 (see FusedDecodeParams)
            const int nthreads = 128 * kg;
            if (part != 0) {
                if (team_items > 0) named_barrier(2 + 2 * team, nthreads);  // group 0 has read the last ones
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int ti = 0; ti < kTiles; ++ti)
                        red[(h * kTiles + ti) * 32] = make_float4(acc[h][ti][0], acc[h][ti][1], acc[h][ti][2], acc[h][ti][3]);
                named_barrier_arrive(1 + 2 * team, nthreads);
                ++team_items;
                continue;
            }
            named_barrier(1 + 2 * team, nthreads);
#pragma unroll 1
            for (int q = 0; q < kg - 1; ++q) {
                const float4* src = red + q * (4 * 2 * kTiles * 32);
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int ti = 0; ti < kTiles; ++ti) {
                        const float4 v = src[(h * kTiles + ti) * 32];
                        acc[h][ti][0] += v.x;
                        acc[h][ti][1] += v.y;
                        acc[h][ti][2] += v.z;
                        acc[h][ti][3] += v.w;
                    }
            }
            named_barrier_arrive(2 + 2 * team, nthreads);
            ++team_items;
        }
        if (kMode == 0 && ksplit > 1) {
            // K-split gate_up: add this chunk's partial sums; the warp bringing the last chunk applies the GLU.
            const int item = (c_mb * nsb + c_sb) * 4 + wig;
            float* sp = p.split_acc + static_cast<long long>(item) * (256 * kTiles) + lane * 4;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int ti = 0; ti < kTiles; ++ti)
                    if (ti == 0 || ti < c_ntiles)
                        red_add_v4_f32(sp + (h * kTiles + ti) * 128, acc[h][ti][0], acc[h][ti][1], acc[h][ti][2],
                                       acc[h][ti][3]);
            __threadfence();
            int prev = 0;
            if (lane == 0) prev = atomicAdd(p.split_cnt + item, 1);
            prev = __shfl_sync(0xffffffffu, prev, 0);
            if (prev != ksplit - 1) continue;
            __threadfence();
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int ti = 0; ti < kTiles; ++ti) {
                    if (ti == 0 || ti < c_ntiles) {
                        float* q = sp + (h * kTiles + ti) * 128;
                        const float4 v = ldcg_f4(q);
                        *reinterpret_cast<float4*>(q) = make_float4(0.f, 0.f, 0.f, 0.f);
                        acc[h][ti][0] = v.x;
                        acc[h][ti][1] = v.y;
                        acc[h][ti][2] = v.z;
                        acc[h][ti][3] = v.w;
                    }
                }
            if (lane == 0) p.split_cnt[item] = 0;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (!((c_act >> h) & 1)) continue;
            const int rb = 8 * c_sb + 2 * wig + h;
            // f(tile, e, row) for this lane's accumulator entries of stored rows (row < valid)
            auto each_row = [&](auto&& f) {
#pragma unroll
                for (int ti = 0; ti < kTiles; ++ti)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (8 * ti + 2 * t + e < c_valid) f(ti, e, 8 * ti + 2 * t + e);
            };
            if (c_gu) {
                const int col = rb * 8 + g;
                each_row([&](int ti, int e, int r) {
                    p.inter[static_cast<long long>(c_mb * kBM + r) * p.inter_stride + col] =
                        __float2bfloat16(glu<kAct>(acc[h][ti][e], acc[h][ti][2 + e]));
                });
            } else if (kMode == 1) {
                const int n0 = rb * 16 + g;
                each_row([&](int ti, int e, int) {
                    float* dst = p.acc + static_cast<long long>(e_tok[ti][e]) * p.acc_stride;
                    const float wt = e_wt[ti][e];
                    if (n0 < p.n_real) red_add_f32(dst + n0, wt * acc[h][ti][e]);
                    if (n0 + 8 < p.n_real) red_add_f32(dst + n0 + 8, wt * acc[h][ti][2 + e]);
                });
                pend_rb[h] = rb;
            } else {
                const int n0 = rb * 16 + g;
                const DecodeParams& pd = kFused ? p2 : p;
                each_row([&](int ti, int e, int r) {
                    // fused: the row of the slot (the in-kernel combine reads a token's slots in order)
                    const int orow = kFused ? s_sorted[c_mb * kBM + r] : c_mb * kBM + r;
                    __nv_bfloat16* dst = pd.out + static_cast<long long>(orow) * pd.out_stride;
                    const float wt = e_wt[ti][e];
                    if (n0 < pd.n_real) dst[n0] = __float2bfloat16(wt * acc[h][ti][e]);
                    if (n0 + 8 < pd.n_real) dst[n0 + 8] = __float2bfloat16(wt * acc[h][ti][2 + e]);
                });
            }
        }
        if constexpr (kFused) {
            if (c_gu) {  // this warp's part of the m-block's intermediate is stored: publish it
                __threadfence();
                __syncwarp();
                if (lane == 0) atomicAdd(gu_done + c_mb, 1);
            } else {
                ++dn_parts;  // published once, when the warp leaves the ring (only the combine waits for them)
            }
        }
    }
    if constexpr (kFused) {
        // the last "free" barrier of the team (group 0 arrived at it after the last item)
        if (kg > 1 && part != 0 && team_items > 0) named_barrier(2 + 2 * team, 128 * kg);
        __threadfence();
        __syncwarp();
        if (lane == 0 && dn_parts) atomicAdd(fp->dn_done, dn_parts);
    }
    if constexpr (kFused) fused_combine(*fp, nmb, fused_flags(smem_raw, 4 * kGroupSmem, fp->mblock_cap, kBM), trace_end);
    if constexpr (kMode == 1) {
        if (pend_check) finish_counters();
        if (pend_rb[0] >= 0 || pend_rb[1] >= 0) {
            bump_counters();
            finish_counters();
        }
    }
}

template <int kFormat, bool kWideScale, int kMode, int kAct, bool kMaskK, int kTiles, int kStages, int kRecs,
          int kSched = 0, bool kSkipMath = false>
__global__ void __launch_bounds__(kDecodeThreads, 1) moe_w4a16_decode(const DecodeParams p) {
    static_assert(kMode <= 2, "the fused mode is moe_w4a16_decode_fused");
    decode_gemm<kFormat, kWideScale, kMode, kAct, kMaskK, kTiles, kStages, kRecs, kSched, kSkipMath>(p, p);
}

template <int kFormat, bool kWideScale, int kAct, bool kMaskK, int kTiles, int kStages, int kRecs>
__global__ void __launch_bounds__(kDecodeThreads, 1) moe_w4a16_decode_fused(const FusedDecodeParams p) {
    decode_gemm<kFormat, kWideScale, 3, kAct, kMaskK, kTiles, kStages, kRecs, 1, false>(p.gate_up, p.down, &p);
}

}  // namespace moe
}  // namespace kiln_dev
