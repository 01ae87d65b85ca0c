// The moe_w4a16 layer's choices, in one place: which kernels a call runs and with which configuration, as a
// function of the routed slots per call (M x top-k) and per expert (the tok_e windows). MoeW4A16Tuning holds
// every knob; default_moe_w4a16_tuning() gives the documented heuristics (docs/perf/moe_w4a16.md, "Choices"),
// and the autotune DB supplies measured values per GPU SKU in the same struct. Every field is also named in
// moe_w4a16_tuning_fields() so benchmarks and the DB can set it by name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "jit/descriptor.hpp"

namespace kiln::autotune {

enum class SchedulePick : uint8_t { automatic = 0, static_shares = 1, dynamic = 2 };

struct MoeW4A16Tuning {
    int tiles = 0;  // decode m-blocks: token tiles of 8 rows (1, 2, 4); 0: choose_tiles() for the largest call
    SchedulePick gate_up_schedule = SchedulePick::automatic;
    SchedulePick down_schedule = SchedulePick::automatic;
    // automatic gate_up schedule: dynamic below this many routed slots, static shares from there on
    int64_t gate_up_dynamic_max_slots = 4096;
    // dynamic schedule: 64-wide K records per work item; -1 automatic (split a call whose whole-K items are too
    // few for the warp groups), 0 whole K. The rows path never splits.
    int gate_up_k_chunk = 0;
    int down_k_chunk = -1;
    int order_window = 1;            // dynamic schedule: m-blocks per claim-order window
    int64_t rows_combine_min = 256;  // routed slots from which down writes rows + a combine launch; -1 never
    // routed slots per local expert (M x topk / experts, other ranks' slots counted) from which a call runs the
    // prefill GEMMs; -1 never, 0 always
    int64_t prefill_min = 128;
    bool prefill_wgmma = true;  // the prefill GEMMs as warpgroup MMAs where the target has them (sm_90a)
    bool prefill_wide = false;  // wgmma prefill with K >= 2048: two super-blocks side by side per CTA
    int prefill_block_m = 0;    // 64, 128, 192; 0: prefill_block_m() from the expected rows per expert
    bool fuse = true;           // decode calls from fused_min routed slots run as one persistent launch
    int64_t fused_min = 1;      // -1 never
    int decode_stages = 0;      // fused kernel ring depth (0: the deepest that fits)
    int decode_block_k = 0;     // inputs per decode stage, 64 / 128 / 256 (0: the family's default)
    int fused_k_groups = 4;     // warp groups sharing each fused item (1, 2, 4) in calls up to ...
    int64_t fused_k_groups_max_slots = 128;  // ... this many routed slots (-1 never)
};

// The heuristics for a weight format (MXFP4: gate_up always on the static schedule).
MoeW4A16Tuning default_moe_w4a16_tuning(jit::WeightFormat format);
// Throws InvalidArgument naming the first field out of range.
void validate(const MoeW4A16Tuning& t);

// Named access, for `kiln bench moe --set name=value`, the autotune DB and `kiln info`.
struct TuningField {
    std::string_view name;
    std::string_view help;
};
std::span<const TuningField> moe_w4a16_tuning_fields();
void set_tuning_field(MoeW4A16Tuning& t, std::string_view name, std::string_view value);  // throws InvalidArgument
std::string tuning_field_text(const MoeW4A16Tuning& t, std::string_view name);
std::string describe(const MoeW4A16Tuning& t);  // "name=value,..." of every field

// Token tiles per decode m-block from the expected rows per active expert: 1 up to 5 rows, 2 up to 11, else 4.
int choose_tiles(int64_t tokens, int topk, int experts);
// Whether a call of `slots` routed slots over `experts` local experts runs the prefill GEMMs.
bool prefill_call(const MoeW4A16Tuning& t, int64_t slots, int experts);
// Rows per prefill m-block: the tuning's, else from the expected rows per expert r = slots / (experts x
// ep_size): 64 below 80 rows, else the smallest of 128 / 192 holding 1.1 r (wgmma only; 64 otherwise).
int prefill_block_m(const MoeW4A16Tuning& t, int64_t slots, int experts, int ep_size, bool wgmma);

// The dynamic schedule's K split: the host asks for automatic chunks of at least k_split_min_records records
// and names a target item count; the device decides from the real m-block count (nothing is read back), and a
// call whose whole-K items reach the target is not split.
struct DecodeSplitRequest {
    int k_chunk = 0;          // DecodeParams::k_chunk: > 0 fixed records per item, 0 whole K, < 0 automatic
    int split_max_items = 0;  // DecodeParams::split_max_items
};
constexpr int k_split_min_records = 8;  // 4 pipeline stages of 128 inputs
// Items per warp group the automatic split aims at: gate_up splits only when the call has too few whole-K
// items to keep every group busy (each split item costs a fence and a partial-sum round trip); down with fp32
// atomics adds its partials anyway, so it splits more finely.
constexpr int k_gate_up_items_per_group = 2;
constexpr int k_down_items_per_group = 8;
// `records` > 0: that many records per item; 0: whole K; -1: automatic for `groups` warp groups.
DecodeSplitRequest decode_split(int records, int groups, int items_per_group);
// gate_up split-K scratch: items (m-block, super-block) a workspace holds, bounded by `max_bytes`.
int split_scratch_items(int split_max_items, int block_m, int64_t max_bytes = int64_t(64) << 20);

}  // namespace kiln::autotune
