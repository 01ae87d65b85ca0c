// moe_w4a16 routing prep (indexed mode): top-k expert ids -> per-expert sorted rows, padded to m-blocks
// of kBlockM rows. One CTA of 1024 threads; nothing is read back to the host, so the launch is
// graph-capturable and the GEMMs read the block count from device memory.
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
// Dynamic shared memory: 2 * E * 4 bytes.
#pragma once

#include "device/prelude.cuh"

namespace kiln_dev {
namespace moe {

struct RoutingParams {
    const i32* topk_ids;
    const float* topk_weights;
    i32* expert_count;
    i32* num_mblocks;
    int2* mblock_info;
    i32* sorted_token;
    float* sorted_weight;
    i32 num_tokens;
    i32 topk;
    i32 num_experts;
    i32 mblock_cap;  // capacity of mblock_info; blocks beyond it are dropped (the host sizes it so none are)
    i32* slot_pos;   // optional (null: not written)
};

template <int kBlockM>
__global__ void __launch_bounds__(1024, 1) moe_w4a16_routing(const RoutingParams p) {
    extern __shared__ i32 smem_route[];
    i32* cnt = smem_route;                    // [E] counts, later the fill cursor
    i32* off = smem_route + p.num_experts;    // [E] first m-block of each expert
    __shared__ i32 warp_tot[32];
    __shared__ i32 total_s;

    const int tid = threadIdx.x, nthr = blockDim.x;
    const int E = p.num_experts;
    const int slots = p.num_tokens * p.topk;

    for (int e = tid; e < E; e += nthr) cnt[e] = 0;
    __syncthreads();
    for (int s = tid; s < slots; s += nthr) {
        int e = p.topk_ids[s];
        if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();

    // Exclusive scan of per-expert block counts: each thread owns a contiguous chunk of experts.
    const int per = (E + nthr - 1) / nthr;
    const int e0 = tid * per, e1 = min(E, e0 + per);
    int local = 0;
    for (int e = e0; e < e1; ++e) local += (cnt[e] + kBlockM - 1) / kBlockM;
    const int lane = tid & 31, warp = tid >> 5;
    int incl = local;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
    }
    if (lane == 31) warp_tot[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int nw = nthr >> 5;
        int v = lane < nw ? warp_tot[lane] : 0;
        int inc = v;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, inc, d);
            if (lane >= d) inc += u;
        }
        if (lane < nw) warp_tot[lane] = inc - v;  // exclusive warp offsets
        if (lane == 31) total_s = inc;
    }
    __syncthreads();
    int run = warp_tot[warp] + incl - local;
    for (int e = e0; e < e1; ++e) {
        off[e] = run;
        run += (cnt[e] + kBlockM - 1) / kBlockM;
    }
    __syncthreads();

    const int total = min(total_s, p.mblock_cap);
    for (int e = tid; e < E; e += nthr) {
        const int c = cnt[e];
        p.expert_count[e] = c;
        const int nb = (c + kBlockM - 1) / kBlockM;
        for (int j = 0; j < nb; ++j) {
            const int mb = off[e] + j;
            if (mb < total) p.mblock_info[mb] = make_int2(e, min(kBlockM, c - j * kBlockM));
        }
    }
    const int rows = total * kBlockM;
    for (int r = tid; r < rows; r += nthr) {
        p.sorted_token[r] = -1;
        p.sorted_weight[r] = 0.0f;
    }
    __syncthreads();
    for (int e = tid; e < E; e += nthr) cnt[e] = 0;
    __syncthreads();
    for (int s = tid; s < slots; s += nthr) {
        int e = p.topk_ids[s];
        int where = -1;
        if (static_cast<unsigned>(e) < static_cast<unsigned>(E)) {
            const int pos = atomicAdd(&cnt[e], 1);
            const int r = off[e] * kBlockM + pos;
            if (r < rows) {
                p.sorted_token[r] = s / p.topk;
                p.sorted_weight[r] = p.topk_weights[s];
                where = r;
            }
        }
        if (p.slot_pos) p.slot_pos[s] = where;
    }
    if (tid == 0) *p.num_mblocks = total;
}

}  // namespace moe
}  // namespace kiln_dev
