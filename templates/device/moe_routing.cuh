// MoE routing prep, indexed mode: top-k expert ids [M, topk] -> rows grouped by expert, each expert's
// rows padded to a multiple of kBlockM, so a grouped GEMM can give every CTA kBlockM rows of one expert.
//
// Outputs (all written by the kernel, nothing read back by the host; one launch, graph-capturable):
//   sorted_ids[sorted_capacity]   flat row index t*topk + j, grouped by expert in ascending order of the
//                                 flat index (stable); padding and the unused tail hold the sentinel
//                                 M*topk.
//   block_expert[max_blocks]      expert of each kBlockM-row block; -1 past the last used block.
//   tokens_per_expert[kExperts]   routed rows per expert.
//   total_padded[1]               rows used in sorted_ids (a multiple of kBlockM).
// Ids outside [0, kExperts) (e.g. experts owned by another rank under expert parallelism) are dropped.
//
// One CTA of kWarps warps. Warp w owns a contiguous slice of the flat ids: it counts its slice per
// expert (hist[w][e]), a scan over warps gives each warp its first row inside each expert (so the
// order is stable), a scan over experts gives each expert's first padded row, then every warp scatters
// its slice. Dynamic shared memory: (kWarps * kExperts + 2 * kExperts + kWarps + 1) * 4 bytes.
#pragma once

#include "device/prelude.cuh"
#include "common/moe_routing_params.h"

namespace kiln_dev {

template <int kExperts, int kTopK, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
moe_routing_indexed(const kiln_params::MoeRoutingParams p) {
    static_assert(kWarps >= 1 && kWarps <= 32, "1..32 warps");
    const i32* __restrict__ topk_ids = p.topk_ids;
    i32* __restrict__ sorted_ids = p.sorted_ids;
    i32* __restrict__ block_expert = p.block_expert;
    i32* __restrict__ tokens_per_expert = p.tokens_per_expert;
    i32* __restrict__ total_padded = p.total_padded;
    const i32 num_tokens = p.num_tokens, sorted_capacity = p.sorted_capacity, max_blocks = p.max_blocks;
    constexpr int kThreads = kWarps * 32;
    extern __shared__ i32 smem[];
    i32* hist = smem;                       // [kWarps][kExperts]: per-warp counts, then write cursors
    i32* count = hist + kWarps * kExperts;  // [kExperts]
    i32* offset = count + kExperts;         // [kExperts]: first padded row of each expert
    i32* warp_sums = offset + kExperts;     // [kWarps + 1]: the scan's scratch

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const i32 n = num_tokens * kTopK;
    const i32 sentinel = n;

    #pragma unroll 1
    for (int i = tid; i < kWarps * kExperts; i += kThreads) hist[i] = 0;
    __syncthreads();

    const i32 per_warp = (n + kWarps - 1) / kWarps;
    const i32 lo = min(n, warp * per_warp);
    const i32 hi = min(n, lo + per_warp);
    i32* my_hist = hist + warp * kExperts;

    // 1. Per-warp histogram of the warp's slice. Lanes holding the same expert form one group; its
    //    lowest lane adds the group size (one writer per expert per step, no atomics needed).
    #pragma unroll 1
    for (i32 base = lo; base < hi; base += 32) {
        const i32 i = base + lane;
        const i32 e = i < hi ? topk_ids[i] : -1;
        const bool valid = e >= 0 && e < kExperts;
        const unsigned peers = __match_any_sync(0xffffffffu, valid ? e : -1);
        if (valid && lane == __ffs(peers) - 1) my_hist[e] += __popc(peers);
        __syncwarp();
    }
    __syncthreads();

    // 2. Per expert: exclusive scan over warps (each warp's first row within the expert), the count,
    //    and the count padded to kBlockM.
    #pragma unroll 1
    for (int e = tid; e < kExperts; e += kThreads) {
        i32 run = 0;
        #pragma unroll 1
        for (int w = 0; w < kWarps; ++w) {
            const i32 c = hist[w * kExperts + e];
            hist[w * kExperts + e] = run;
            run += c;
        }
        count[e] = run;
        tokens_per_expert[e] = run;
        offset[e] = (run + kBlockM - 1) / kBlockM * kBlockM;
    }
    __syncthreads();

    // 3. Exclusive scan of the padded counts over experts. Thread t owns a contiguous run of experts.
    constexpr int kPer = (kExperts + kThreads - 1) / kThreads;
    const int e0 = min(kExperts, tid * kPer);
    const int e1 = min(kExperts, e0 + kPer);
    i32 local = 0;
    #pragma unroll 1
    for (int e = e0; e < e1; ++e) local += offset[e];
    i32 prefix = block_exclusive_scan(local, warp_sums);
    if (tid == 0) total_padded[0] = warp_sums[kWarps];
    #pragma unroll 1
    for (int e = e0; e < e1; ++e) {
        const i32 padded = offset[e];
        offset[e] = prefix;
        prefix += padded;
    }
    __syncthreads();

    // 4. Scatter: each warp walks its slice again in order; rank inside the group of equal experts
    //    plus the warp's cursor gives the row.
    const unsigned lanes_below = (1u << lane) - 1u;
    #pragma unroll 1
    for (i32 base = lo; base < hi; base += 32) {
        const i32 i = base + lane;
        const i32 e = i < hi ? topk_ids[i] : -1;
        const bool valid = e >= 0 && e < kExperts;
        const unsigned peers = __match_any_sync(0xffffffffu, valid ? e : -1);
        if (valid) {
            const i32 row = offset[e] + my_hist[e] + __popc(peers & lanes_below);
            if (row < sorted_capacity) sorted_ids[row] = i;
        }
        __syncwarp();
        if (valid && lane == __ffs(peers) - 1) my_hist[e] += __popc(peers);
        __syncwarp();
    }

    // 5. Padding rows, per-block experts, and the unused tail.
    #pragma unroll 1
    for (int e = tid; e < kExperts; e += kThreads) {
        const i32 first = offset[e];
        const i32 used = count[e];
        const i32 padded = (used + kBlockM - 1) / kBlockM * kBlockM;
        #pragma unroll 1
        for (i32 r = first + used; r < first + padded && r < sorted_capacity; ++r) sorted_ids[r] = sentinel;
        #pragma unroll 1
        for (i32 b = first / kBlockM; b < (first + padded) / kBlockM && b < max_blocks; ++b) block_expert[b] = e;
    }
    // Rows in use: the last expert's first row plus its padded count.
    const i32 used_rows = offset[kExperts - 1] + (count[kExperts - 1] + kBlockM - 1) / kBlockM * kBlockM;
    #pragma unroll 1
    for (i32 r = used_rows + tid; r < sorted_capacity; r += kThreads) sorted_ids[r] = sentinel;
    #pragma unroll 1
    for (i32 b = used_rows / kBlockM + tid; b < max_blocks; b += kThreads) block_expert[b] = -1;
}

}  // namespace kiln_dev
