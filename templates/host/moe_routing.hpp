// MoE routing prep on the host target, indexed mode: the same outputs as
// templates/device/moe_routing.cuh, bit for bit.
//
//   sorted_ids[sorted_capacity]   flat row index t*topk + j, grouped by expert in ascending order of the
//                                 flat index (stable); each expert padded to a multiple of kBlockM;
//                                 padding and the unused tail hold the sentinel M*topk.
//   block_expert[max_blocks]      expert of each kBlockM-row block; -1 past the last used block.
//   tokens_per_expert[kExperts]   routed rows per expert.
//   total_padded[1]               rows used in sorted_ids (a multiple of kBlockM).
// Ids outside [0, kExperts) are dropped; rows and blocks past the capacities are not written.
//
// The flat ids are cut into up to kMaxSlices contiguous slices: a per-slice histogram (parallel), an
// exclusive scan over slices per expert and over experts (serial, kExperts * slices steps), then a
// parallel scatter in which each slice writes its rows in order (stable without atomics) and a
// parallel fill of padding, block experts and the tail. Small inputs use one slice on one thread.
#pragma once

#include "host/prelude.hpp"
#include "common/moe_routing_params.h"

namespace kiln_host {

using MoeRoutingArgs = kiln_params::MoeRoutingParams;

template <int kExperts, int kTopK, int kBlockM>
inline void moe_routing_indexed(const kiln_host_ctx* ctx, const MoeRoutingArgs& a) {
    static_assert(kExperts >= 1 && kTopK >= 1 && kBlockM >= 1, "bad routing shape");
    constexpr int kMaxSlices = 16;
    constexpr i64 kMinPerSlice = 4096;  // below this a slice is not worth a thread

    const i64 n = static_cast<i64>(a.num_tokens) * kTopK;
    const i32 sentinel = static_cast<i32>(n);
    const i64 cap = a.sorted_capacity, max_blocks = a.max_blocks;
    const i32* ids = a.topk_ids;

    i64 slices = ceil_div(n, kMinPerSlice);
    if (slices > kMaxSlices) slices = kMaxSlices;
    if (slices > static_cast<i64>(ctx->num_threads)) slices = ctx->num_threads;
    if (slices < 1) slices = 1;
    const i64 per_slice = slices > 0 ? ceil_div(n, slices) : 0;

    // hist[s][e]: counts of slice s, then its first row within expert e.
    static_assert(kExperts <= 16384, "the per-slice tables live on the stack");
    i32 hist[kMaxSlices][kExperts];
    i32 first[kExperts];  // first padded row of each expert

    auto count_slice = [&](i64 s) {
        i32* h = hist[s];
        for (int e = 0; e < kExperts; ++e) h[e] = 0;
        const i64 lo = min(n, s * per_slice), hi = min(n, lo + per_slice);
        for (i64 i = lo; i < hi; ++i) {
            const i32 e = ids[i];
            if (static_cast<u32>(e) < static_cast<u32>(kExperts)) ++h[e];
        }
    };
    if (slices == 1) {
        count_slice(0);
    } else {
        auto body = [&](i64 b, i64 e) {
            for (i64 s = b; s < e; ++s) count_slice(s);
        };
        parallel_for(ctx, slices, 1, body);
    }

    i64 row = 0;
    for (int e = 0; e < kExperts; ++e) {
        i32 run = 0;
        for (i64 s = 0; s < slices; ++s) {
            const i32 c = hist[s][e];
            hist[s][e] = run;
            run += c;
        }
        a.tokens_per_expert[e] = run;
        first[e] = static_cast<i32>(row);
        row += ceil_div(run, kBlockM) * kBlockM;
    }
    const i64 used_rows = row;
    a.total_padded[0] = static_cast<i32>(used_rows);

    auto scatter_slice = [&](i64 s) {
        i32* cursor = hist[s];
        const i64 lo = min(n, s * per_slice), hi = min(n, lo + per_slice);
        for (i64 i = lo; i < hi; ++i) {
            const i32 e = ids[i];
            if (static_cast<u32>(e) >= static_cast<u32>(kExperts)) continue;
            const i64 r = static_cast<i64>(first[e]) + cursor[e]++;
            if (r < cap) a.sorted_ids[r] = static_cast<i32>(i);
        }
    };
    // Padding rows and block experts of experts [e0, e1).
    auto pad_experts = [&](i64 e0, i64 e1) {
        for (i64 e = e0; e < e1; ++e) {
            const i64 f = first[e], used = a.tokens_per_expert[e];
            const i64 padded = ceil_div(used, kBlockM) * kBlockM;
            for (i64 r = f + used; r < f + padded && r < cap; ++r) a.sorted_ids[r] = sentinel;
            for (i64 b = f / kBlockM; b < (f + padded) / kBlockM && b < max_blocks; ++b)
                a.block_expert[b] = static_cast<i32>(e);
        }
    };
    auto tail = [&](i64 b, i64 e) {
        for (i64 r = used_rows + b; r < used_rows + e; ++r) a.sorted_ids[r] = sentinel;
    };
    const i64 first_free_block = used_rows / kBlockM;

    if (slices == 1) {
        scatter_slice(0);
        pad_experts(0, kExperts);
        if (cap > used_rows) tail(0, cap - used_rows);
        for (i64 b = first_free_block; b < max_blocks; ++b) a.block_expert[b] = -1;
        return;
    }
    auto scatter = [&](i64 b, i64 e) {
        for (i64 s = b; s < e; ++s) scatter_slice(s);
    };
    parallel_for(ctx, slices, 1, scatter);
    parallel_for(ctx, kExperts, 64, pad_experts);
    if (cap > used_rows) parallel_for(ctx, cap - used_rows, 1 << 16, tail);
    for (i64 b = first_free_block; b < max_blocks; ++b) a.block_expert[b] = -1;
}

}  // namespace kiln_host
