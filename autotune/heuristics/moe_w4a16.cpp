#include "autotune/heuristics/moe_w4a16.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <variant>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::autotune {

namespace {

using Member = std::variant<int MoeW4A16Tuning::*, int64_t MoeW4A16Tuning::*, bool MoeW4A16Tuning::*,
                            SchedulePick MoeW4A16Tuning::*>;

struct FieldEntry {
    TuningField field;
    Member member;
};

const FieldEntry k_entries[] = {
    {{"tiles", "decode token tiles per m-block: 1, 2, 4 (0: from the largest call)"}, &MoeW4A16Tuning::tiles},
    {{"gate_up_schedule", "auto, static or dynamic"}, &MoeW4A16Tuning::gate_up_schedule},
    {{"down_schedule", "auto, static or dynamic"}, &MoeW4A16Tuning::down_schedule},
    {{"gate_up_dynamic_max_slots", "auto gate_up schedule: dynamic below this many routed slots"},
     &MoeW4A16Tuning::gate_up_dynamic_max_slots},
    {{"gate_up_k_chunk", "K records per dynamic gate_up item (-1 auto, 0 whole K)"}, &MoeW4A16Tuning::gate_up_k_chunk},
    {{"down_k_chunk", "K records per dynamic down item (-1 auto, 0 whole K)"}, &MoeW4A16Tuning::down_k_chunk},
    {{"order_window", "dynamic schedule: m-blocks per claim-order window"}, &MoeW4A16Tuning::order_window},
    {{"rows_combine_min", "routed slots from which down writes rows + combine (-1 never)"},
     &MoeW4A16Tuning::rows_combine_min},
    {{"prefill_min", "routed slots per expert from which the prefill GEMMs run (-1 never)"},
     &MoeW4A16Tuning::prefill_min},
    {{"prefill_wgmma", "prefill GEMMs as warpgroup MMAs (sm_90a)"}, &MoeW4A16Tuning::prefill_wgmma},
    {{"prefill_wide", "wgmma prefill: two super-blocks side by side for K >= 2048"}, &MoeW4A16Tuning::prefill_wide},
    {{"prefill_block_m", "prefill m-block rows: 64, 128, 192 (0: from the rows per expert)"},
     &MoeW4A16Tuning::prefill_block_m},
    {{"fuse", "decode calls as one persistent launch"}, &MoeW4A16Tuning::fuse},
    {{"fused_min", "routed slots from which decode calls fuse (-1 never)"}, &MoeW4A16Tuning::fused_min},
    {{"decode_stages", "fused kernel ring depth (0: deepest that fits)"}, &MoeW4A16Tuning::decode_stages},
    {{"decode_block_k", "inputs per decode stage: 64, 128, 256 (0: default)"}, &MoeW4A16Tuning::decode_block_k},
    {{"fused_k_groups", "warp groups sharing each fused item: 1, 2, 4"}, &MoeW4A16Tuning::fused_k_groups},
    {{"fused_k_groups_max_slots", "... in fused calls up to this many routed slots (-1 never)"},
     &MoeW4A16Tuning::fused_k_groups_max_slots},
};

const TuningField* field_list() {
    static const auto fields = [] {
        std::array<TuningField, std::size(k_entries)> f{};
        for (size_t i = 0; i < f.size(); ++i) f[i] = k_entries[i].field;
        return f;
    }();
    return fields.data();
}

const FieldEntry& entry(std::string_view name) {
    for (const FieldEntry& e : k_entries)
        if (e.field.name == name) return e;
    std::string names;
    for (const FieldEntry& e : k_entries) names += fmt::format("{}{}", names.empty() ? "" : ", ", e.field.name);
    throw InvalidArgument(fmt::format("unknown moe_w4a16 tuning field '{}' (fields: {})", name, names));
}

int64_t parse_integer(std::string_view name, std::string_view text) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size() || text.empty())
        throw InvalidArgument(fmt::format("{}={}: expected an integer", name, text));
    return v;
}

const char* to_text(SchedulePick p) {
    return p == SchedulePick::static_shares ? "static" : p == SchedulePick::dynamic ? "dynamic" : "auto";
}

}  // namespace

MoeW4A16Tuning default_moe_w4a16_tuning(jit::WeightFormat format) {
    MoeW4A16Tuning t;
    // MXFP4 gate_up: the static shares measured faster at every size, also against the dynamic schedule with K split.
    t.gate_up_dynamic_max_slots = format == jit::WeightFormat::mxfp4_g32_e8m0 ? 0 : 4096;
    return t;
}

void validate(const MoeW4A16Tuning& t) {
    auto bad = [](std::string_view f, auto v, std::string_view want) {
        throw InvalidArgument(fmt::format("moe_w4a16 tuning {}={}: {}", f, v, want));
    };
    if (t.tiles != 0 && t.tiles != 1 && t.tiles != 2 && t.tiles != 4) bad("tiles", t.tiles, "0, 1, 2 or 4");
    if (t.gate_up_k_chunk < -1) bad("gate_up_k_chunk", t.gate_up_k_chunk, "-1 (auto), 0 (whole K) or records");
    if (t.down_k_chunk < -1) bad("down_k_chunk", t.down_k_chunk, "-1 (auto), 0 (whole K) or records");
    if (t.order_window < 1) bad("order_window", t.order_window, "at least 1");
    if (t.gate_up_dynamic_max_slots < 0) bad("gate_up_dynamic_max_slots", t.gate_up_dynamic_max_slots, "at least 0");
    if (t.rows_combine_min < -1) bad("rows_combine_min", t.rows_combine_min, "-1 (never) or routed slots");
    if (t.prefill_min < -1) bad("prefill_min", t.prefill_min, "-1 (never) or routed slots per expert");
    if (t.prefill_block_m != 0 && t.prefill_block_m != 64 && t.prefill_block_m != 128 && t.prefill_block_m != 192)
        bad("prefill_block_m", t.prefill_block_m, "0 (auto), 64, 128 or 192");
    if (t.fused_min < -1) bad("fused_min", t.fused_min, "-1 (never) or routed slots");
    if (t.decode_stages < 0 || t.decode_stages > 8) bad("decode_stages", t.decode_stages, "0 (auto) to 8");
    if (t.decode_block_k != 0 && t.decode_block_k != 64 && t.decode_block_k != 128 && t.decode_block_k != 256)
        bad("decode_block_k", t.decode_block_k, "0 (auto), 64, 128 or 256");
    if (t.fused_k_groups != 1 && t.fused_k_groups != 2 && t.fused_k_groups != 4)
        bad("fused_k_groups", t.fused_k_groups, "1, 2 or 4");
    if (t.fused_k_groups_max_slots < -1) bad("fused_k_groups_max_slots", t.fused_k_groups_max_slots, "-1 or slots");
}

std::span<const TuningField> moe_w4a16_tuning_fields() { return {field_list(), std::size(k_entries)}; }

void set_tuning_field(MoeW4A16Tuning& t, std::string_view name, std::string_view value) {
    const FieldEntry& e = entry(name);
    std::visit(
        [&](auto m) {
            using M = std::remove_cvref_t<decltype(t.*m)>;
            if constexpr (std::is_same_v<M, bool>) {
                if (value == "true" || value == "1") t.*m = true;
                else if (value == "false" || value == "0") t.*m = false;
                else throw InvalidArgument(fmt::format("{}={}: expected true or false", name, value));
            } else if constexpr (std::is_same_v<M, SchedulePick>) {
                if (value == "auto") t.*m = SchedulePick::automatic;
                else if (value == "static") t.*m = SchedulePick::static_shares;
                else if (value == "dynamic") t.*m = SchedulePick::dynamic;
                else throw InvalidArgument(fmt::format("{}={}: expected auto, static or dynamic", name, value));
            } else if constexpr (std::is_same_v<M, int>) {
                const int64_t v = parse_integer(name, value);
                if (v < INT32_MIN || v > INT32_MAX) throw InvalidArgument(fmt::format("{}={}: out of range", name, value));
                t.*m = static_cast<int>(v);
            } else {
                t.*m = parse_integer(name, value);
            }
        },
        e.member);
}

std::string tuning_field_text(const MoeW4A16Tuning& t, std::string_view name) {
    const FieldEntry& e = entry(name);
    return std::visit(
        [&](auto m) -> std::string {
            using M = std::remove_cvref_t<decltype(t.*m)>;
            if constexpr (std::is_same_v<M, bool>) return t.*m ? "true" : "false";
            else if constexpr (std::is_same_v<M, SchedulePick>) return to_text(t.*m);
            else return std::to_string(static_cast<int64_t>(t.*m));
        },
        e.member);
}

std::string describe(const MoeW4A16Tuning& t) {
    std::string out;
    for (const FieldEntry& e : k_entries)
        out += fmt::format("{}{}={}", out.empty() ? "" : ",", e.field.name, tuning_field_text(t, e.field.name));
    return out;
}

int choose_tiles(int64_t tokens, int topk, int experts) {
    const double n = static_cast<double>(tokens) * topk;
    if (n <= 0 || experts <= 0) return 1;
    const double active = experts * (1.0 - std::pow(1.0 - 1.0 / experts, n));
    const double rows = n / std::max(1.0, active);
    if (rows <= 5.0) return 1;
    if (rows <= 11.0) return 2;
    return 4;
}

bool prefill_call(const MoeW4A16Tuning& t, int64_t slots, int experts) {
    return t.prefill_min >= 0 && slots >= t.prefill_min * experts;
}

int prefill_block_m(const MoeW4A16Tuning& t, int64_t slots, int experts, int ep_size, bool wgmma) {
    if (t.prefill_block_m != 0) return t.prefill_block_m;
    if (!wgmma) return 64;
    const double r = static_cast<double>(slots) / (static_cast<double>(experts) * std::max(1, ep_size));
    if (r < 80.0) return 64;
    return 1.1 * r <= 128.0 ? 128 : 192;
}

DecodeSplitRequest decode_split(int records, int groups, int items_per_group) {
    if (records > 0) return {records, 1 << 30};
    if (records == 0) return {};
    return {-k_split_min_records, std::max(1, items_per_group * groups)};
}

int split_scratch_items(int split_max_items, int block_m, int64_t max_bytes) {
    const int64_t per_item = int64_t(128) * block_m * 4;
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(split_max_items, max_bytes / per_item)));
}

}  // namespace kiln::autotune
