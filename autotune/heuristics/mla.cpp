#include "autotune/heuristics/mla.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::autotune {

void validate(const MlaTuning& t) {
    const auto rows_ok = [](int r) { return r == 8 || r == 16 || r == 24 || r == 32; };
    if (!rows_ok(t.decode_heads_per_cta))
        throw InvalidArgument(fmt::format("mla tuning: decode_heads_per_cta={} must be 8, 16, 24 or 32", t.decode_heads_per_cta));
    if (t.prefill_tokens_per_cta != 1 && t.prefill_tokens_per_cta != 2 && t.prefill_tokens_per_cta != 4)
        throw InvalidArgument(fmt::format("mla tuning: prefill_tokens_per_cta={} must be 1, 2 or 4", t.prefill_tokens_per_cta));
    if (t.prefill_heads_per_cta < 1 || !rows_ok(t.prefill_tokens_per_cta * t.prefill_heads_per_cta))
        throw InvalidArgument(fmt::format("mla tuning: prefill_tokens_per_cta x prefill_heads_per_cta = {} x {} must be "
                                          "8, 16, 24 or 32",
                                          t.prefill_tokens_per_cta, t.prefill_heads_per_cta));
    if (t.decode_mma && t.decode_heads_per_cta != 32)
        throw InvalidArgument(fmt::format("mla tuning: decode_mma needs decode_heads_per_cta=32, not {}", t.decode_heads_per_cta));
    if (t.prefill_mma && t.prefill_tokens_per_cta * t.prefill_heads_per_cta != 32)
        throw InvalidArgument(fmt::format("mla tuning: prefill_mma needs 32 rows, not {} x {}", t.prefill_tokens_per_cta,
                                          t.prefill_heads_per_cta));
    if (t.target_ctas_per_cu < 1)
        throw InvalidArgument(fmt::format("mla tuning: target_ctas_per_cu={} must be positive", t.target_ctas_per_cu));
    if (t.min_split_keys < 64 || t.min_split_keys % 64 != 0)
        throw InvalidArgument(fmt::format("mla tuning: min_split_keys={} must be a positive multiple of 64", t.min_split_keys));
    if (t.max_splits < 1 || t.max_splits > 64)
        throw InvalidArgument(fmt::format("mla tuning: max_splits={} must be in [1, 64]", t.max_splits));
    if (t.partial_rows < 0) throw InvalidArgument(fmt::format("mla tuning: partial_rows={} is negative", t.partial_rows));
}

MlaSplit choose_mla_split(const MlaTuning& t, int64_t max_kv, int64_t ctas, int64_t rows, int compute_units) {
    const auto round64 = [](int64_t v) { return std::max<int64_t>(64, (v + 63) / 64 * 64); };
    MlaSplit s;
    s.split_keys = static_cast<int>(round64(max_kv));
    const int64_t target = int64_t(t.target_ctas_per_cu) * std::max(1, compute_units);
    int64_t want = ctas > 0 ? (target + ctas - 1) / ctas : 1;
    want = std::min<int64_t>(want, t.max_splits);
    want = std::min<int64_t>(want, rows > 0 ? t.partial_rows / rows : 1);
    want = std::min<int64_t>(want, max_kv / t.min_split_keys);
    if (want < 2) return s;
    s.split_keys = static_cast<int>(round64((max_kv + want - 1) / want));
    s.splits = static_cast<int>((max_kv + s.split_keys - 1) / s.split_keys);
    if (s.splits < 2) {
        s.splits = 1;
        s.split_keys = static_cast<int>(round64(max_kv));
    }
    return s;
}

}  // namespace kiln::autotune
