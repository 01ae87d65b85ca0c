// Host-side choices for the moe_w4a16 decode GEMMs' dynamic schedule (templates/device/
// moe_w4a16_decode.cuh, kSched 1). The K split is decided on the device from the real m-block count
// (nothing is read back to the host): the host asks for automatic chunks of at least
// k_split_min_records records and names a target item count; a call whose whole-K items reach the
// target is not split. Header-only and free of kiln dependencies so the development harness asks
// exactly what the layer asks.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::jit::moe {

struct DecodeSplitRequest {
    int k_chunk = 0;          // DecodeParams::k_chunk: > 0 fixed records per item, 0 whole K, < 0 automatic
    int split_max_items = 0;  // DecodeParams::split_max_items
};

constexpr int k_split_min_records = 8;  // 4 pipeline stages of 128 inputs
// Items per warp group the automatic split aims at: gate_up splits only when the call has too few
// whole-K items to keep every group busy (each split item costs a fence and a partial-sum round
// trip); down with fp32 atomics adds its partials anyway, so it splits more finely.
constexpr int k_gate_up_items_per_group = 2;
constexpr int k_down_items_per_group = 8;

// `records` > 0: that many 64-wide records per item (always, within the scratch); 0: whole K;
// -1: automatic for `groups` warp groups (4 per SM) and `items_per_group` items each.
inline DecodeSplitRequest decode_split(int records, int groups, int items_per_group) {
    if (records > 0) return {records, 1 << 30};
    if (records == 0) return {};
    return {-k_split_min_records, std::max(1, items_per_group * groups)};
}

// gate_up split-K scratch: items (m-block, super-block) a workspace holds, bounded by `max_bytes`.
inline int split_scratch_items(int split_max_items, int block_m, int64_t max_bytes = int64_t(64) << 20) {
    const int64_t per_item = int64_t(128) * block_m * 4;
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(split_max_items, max_bytes / per_item)));
}

}  // namespace kiln::jit::moe
