// Host-side choices for the moe_w4a16 decode GEMMs' dynamic schedule (templates/device/
// moe_w4a16_decode.cuh, kSched 1): how finely to cut K into work items so that every warp group gets
// enough items to balance (only the down GEMM combining with fp32 atomics splits K; gate_up and the
// rows path never do). Header-only and free of kiln dependencies so the development harness computes
// exactly what the layer computes.
//
// The GEMMs read the real m-block count from device memory; these estimates only size the K chunks
// (the kernel decides at run time whether to split at all: never above split_max_items items).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kiln::jit::moe {

struct DecodeScheduleChoice {
    int k_chunk = 0;          // 64-wide records per item along K; 0 = whole K
    int split_max_items = 0;  // (m-block, super-block) items above which the kernel does not split K
};

// Expected m-blocks of `block_m` rows for `tokens` tokens routed top-`topk` among `experts` uniformly.
inline double expected_mblocks(int64_t tokens, int topk, int experts, int block_m) {
    if (tokens <= 0 || experts <= 0 || topk <= 0) return 0.0;
    const double n = static_cast<double>(tokens) * topk;
    const double p_miss = std::pow(std::max(0.0, 1.0 - static_cast<double>(topk) / experts), static_cast<double>(tokens));
    const double active = std::max(1.0, experts * (1.0 - p_miss));
    const double rows = n / active;
    return active * std::ceil(rows / block_m);
}

// K chunk for `groups` warp groups (4 per SM) wanting at least `items_per_group` items each.
// n_pad, k_pad: the matrix in the layout; recs: 64-wide records per pipeline stage (1 or 2).
// Chunks are at least `min_records` records (4 pipeline stages of 128 inputs by default).
inline DecodeScheduleChoice choose_decode_schedule(int64_t tokens, int topk, int experts, int block_m, int n_pad,
                                                   int k_pad, int recs, int groups, int items_per_group = 8,
                                                   int min_records = 8) {
    DecodeScheduleChoice c;
    const int nq = k_pad / 64;
    const int nsb = n_pad / 128;
    c.split_max_items = items_per_group * groups;
    const double base = std::max(1.0, expected_mblocks(tokens, topk, experts, block_m) * nsb);
    const int want_split = static_cast<int>(std::ceil(items_per_group * static_cast<double>(groups) / base));
    const int max_split = std::max(1, nq / std::max(min_records, recs));
    const int split = std::clamp(want_split, 1, max_split);
    if (split <= 1) return c;
    int chunk = (nq + split - 1) / split;
    chunk = (chunk + recs - 1) / recs * recs;
    if (chunk < nq) c.k_chunk = chunk;
    return c;
}

}  // namespace kiln::jit::moe
