// moe_w4a16 routing prep (indexed mode): top-k expert ids -> per-expert sorted rows, padded to m-blocks
// of kBlockM rows. CTAs of 1024 threads (one for decode sizes; prefill sizes spread the scatter, whose
// scattered stores bound a single SM, over several: each counts every slot and places its own chunk);
// nothing is read back to the host, so the launch is graph-capturable and the GEMMs read the block count
// from device memory.
//
// Inputs:  topk_ids [M, topk] int32 (ids outside [0, E) are skipped: experts of other EP ranks),
//          topk_weights [M, topk] fp32.
// Outputs: expert_count [E]            rows routed to each expert
//          num_mblocks [1]             m-blocks in use (sum over experts of ceil(count / kBlockM))
//          mblock_info [cap] int2      (expert, valid rows in the block)
//          sorted_token [cap*kBlockM]  token of each row, -1 for padding
//          sorted_weight [cap*kBlockM] router weight of each row, 0 for padding
//          slot_pos [M, topk]          (optional) sorted row of each slot, -1 when it has none (expert of
//                                      another rank, or beyond the capacity); read by the combine kernel
// Rows of one expert are contiguous; their order inside the expert is unspecified.
// Dynamic shared memory: 3 * E * 4 bytes.
#pragma once

#include "device/prelude.cuh"
#include "common/moe_w4a16_route_params.h"

namespace kiln_dev {
namespace moe {

using kiln_params::moe::RoutingParams;

template <int kBlockM>
__global__ void __launch_bounds__(1024, 1) moe_w4a16_routing(const RoutingParams p) {
    // The GEMM launched after this kernel may start now and wait for our results in griddepcontrol.wait
    // (programmatic dependent launch, sm_90): its launch and prologue overlap this kernel.
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    extern __shared__ i32 smem_route[];
    i32* cnt = smem_route;                    // [E] rows per expert (all slots)
    i32* cur = smem_route + p.num_experts;    // [E] rows per expert in the slots before this CTA's chunk,
                                              //     then this CTA's scatter cursor (counting up)
    i32* off = smem_route + 2 * p.num_experts;  // [E] first m-block of each expert
    __shared__ i32 scan[33];

    const int tid = threadIdx.x, nthr = blockDim.x;
    const int E = p.num_experts;
    const int slots = p.num_tokens * p.topk;
    // Every CTA counts all slots (the same totals and m-block offsets everywhere, no grid-wide sync) and
    // scatters its own contiguous chunk: CTA c places its rows of expert e after those of CTAs 0..c-1.
    const int chunk = (slots + gridDim.x - 1) / gridDim.x;
    const int s_begin = min(slots, static_cast<int>(blockIdx.x) * chunk), s_end = min(slots, s_begin + chunk);
    constexpr int kCached = 4;  // expert ids of a thread's first slots, read from global memory once

    for (int e = tid; e < E; e += nthr) cnt[e] = cur[e] = 0;
    int ids[kCached];
    float wts[kCached];  // one CTA (decode sizes): the router weights of the same slots, loaded with the ids so
                         // that the scatter does not wait for a second global round trip
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
        const int s = tid + j * nthr;
        ids[j] = s < slots ? __ldg(p.topk_ids + s) : -1;
        wts[j] = gridDim.x == 1 && s < slots ? __ldg(p.topk_weights + s) : 0.0f;
    }
    __syncthreads();
    auto count = [&](int s, int e) {
        if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) {
            atomicAdd(&cnt[e], 1);
            if (s < s_begin) atomicAdd(&cur[e], 1);
        }
    };
#pragma unroll
    for (int j = 0; j < kCached; ++j) count(tid + j * nthr, ids[j]);
    // Past the cached slots (prefill sizes): kBatch independent loads in flight per thread, so a CTA
    // pays a memory latency per kBatch x 1024 slots rather than per 1024.
    constexpr int kBatch = 8;
    for (int s0 = tid + kCached * nthr; s0 < slots; s0 += kBatch * nthr) {
        int e[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int s = s0 + j * nthr;
            e[j] = s < slots ? __ldg(p.topk_ids + s) : -1;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) count(s0 + j * nthr, e[j]);
    }
    __syncthreads();

    // Exclusive scan of per-expert block counts: each thread owns a contiguous chunk of experts.
    const int per = (E + nthr - 1) / nthr;
    const int e0 = tid * per, e1 = min(E, e0 + per);
    int local = 0;
    for (int e = e0; e < e1; ++e) local += (cnt[e] + kBlockM - 1) / kBlockM;
    const int lane = tid & 31, warp = tid >> 5;
    int run = block_exclusive_scan(local, scan);

    // Per owned expert: its first m-block; CTA 0 also writes the count and the m-block descriptors.
    const int total = min(scan[nthr >> 5], p.mblock_cap);
    const int rows = total * kBlockM;
    const bool writer = blockIdx.x == 0;
    for (int e = e0; e < e1; ++e) {
        const int c = cnt[e];
        const int nb = (c + kBlockM - 1) / kBlockM;
        off[e] = run;
        if (writer) {
            p.expert_count[e] = c;
            for (int j = 0; j < nb; ++j) {
                const int mb = run + j;
                if (mb < total) p.mblock_info[mb] = make_int2(e, min(kBlockM, c - j * kBlockM));
            }
        }
        run += nb;
    }
    __syncthreads();
    // The padding rows of each expert's last m-block (the scatter fills the others, so nothing is written
    // twice): expert e by CTA e % gridDim.x, one warp per expert, lanes on consecutive rows (one thread
    // per expert writing its rows in turn makes every warp store touch 32 lines, all in CTA 0).
    for (int e = static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) * warp; e < E;
         e += static_cast<int>(gridDim.x) * (nthr >> 5)) {
        const int c = cnt[e];
        const int r1 = min((off[e] + (c + kBlockM - 1) / kBlockM) * kBlockM, rows);
        for (int r = off[e] * kBlockM + c + lane; r < r1; r += 32) {
            p.sorted_token[r] = -1;
            p.sorted_weight[r] = 0.0f;
        }
    }

    auto place = [&](int s, int e, float w) {
        int where = -1;
        if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) {
            const int pos = atomicAdd(&cur[e], 1);  // after the earlier CTAs' rows; in some order inside the CTA
            const int r = off[e] * kBlockM + pos;
            if (r < rows) {
                p.sorted_token[r] = s / p.topk;
                p.sorted_weight[r] = w;
                where = r;
            }
        }
        if (p.slot_pos) p.slot_pos[s] = where;
    };
    if (gridDim.x == 1) {
#pragma unroll
        for (int j = 0; j < kCached; ++j) {
            const int s = tid + j * nthr;
            if (s < slots) place(s, ids[j], wts[j]);
        }
    }
    for (int s0 = s_begin + tid + (gridDim.x == 1 ? kCached * nthr : 0); s0 < s_end; s0 += kBatch * nthr) {
        int e[kBatch];
        float w[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int s = s0 + j * nthr;
            e[j] = s < s_end ? __ldg(p.topk_ids + s) : -1;
            w[j] = s < s_end ? __ldg(p.topk_weights + s) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
            if (s0 + j * nthr < s_end) place(s0 + j * nthr, e[j], w[j]);
    }
    if (writer && tid == 0) *p.num_mblocks = total;
}

}  // namespace moe
}  // namespace kiln_dev
