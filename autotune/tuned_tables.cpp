#include "autotune/tuned_tables.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "autotune/tune_db.hpp"
#include "runtime/error.hpp"

namespace kiln::autotune {

TunedTables TunedTables::load(const std::string& path, const SkuIdentity& sku) {
    TuneDb db = TuneDb::open_read(path);
    if (const std::string why = db.refusal(sku); !why.empty()) throw TuneDbError(why);
    return from_db(db);
}

TunedTables TunedTables::load_for_target(const std::string& path, const std::string& target) {
    TuneDb db = TuneDb::open_read(path);
    const SkuIdentity& s = db.sku();
    const bool ok = target == "host" ? s.kind == "host" : s.target == target;
    if (!ok)
        throw TuneDbError(fmt::format("{} was tuned for {} ({}), not for {}", path, s.target, s.summary(), target));
    return from_db(db);
}

TunedTables TunedTables::from_db(const TuneDb& db) {
    const std::string& path = db.path();
    TunedTables t;
    t.path_ = path;
    t.sku_ = db.sku();
    t.windows_ = db.m_windows();  // ordered by shape, m_lo
    std::sort(t.windows_.begin(), t.windows_.end(), [](const MWindow& a, const MWindow& b) {
        return a.shape != b.shape ? a.shape < b.shape : a.m_lo < b.m_lo;
    });
    for (size_t i = 0; i < t.windows_.size(); ++i) {
        if (t.ranges_.empty() || t.ranges_.back().shape != t.windows_[i].shape) t.ranges_.push_back({t.windows_[i].shape, i, 0});
        ++t.ranges_.back().count;
    }
    t.verify_cost_ = db.verify_cost();
    return t;
}

std::span<const MWindow> TunedTables::windows(const ShapeKey& shape) const {
    auto it = std::lower_bound(ranges_.begin(), ranges_.end(), shape,
                               [](const Range& r, const ShapeKey& k) { return r.shape < k; });
    if (it == ranges_.end() || it->shape != shape) return {};
    return std::span<const MWindow>(windows_).subspan(it->first, it->count);
}

std::vector<ShapeKey> TunedTables::shapes() const {
    std::vector<ShapeKey> out;
    for (const Range& r : ranges_) out.push_back(r.shape);
    return out;
}

std::string TunedTables::in_force(const ShapeKey& shape) const {
    if (path_.empty()) return "heuristics (no tune DB)";
    const auto w = windows(shape);
    if (w.empty()) return fmt::format("heuristics ({} has no windows for {})", path_, shape.text());
    return fmt::format("tuned ({}: {} window{})", path_, w.size(), w.size() == 1 ? "" : "s");
}

ShapeKey moe_w4a16_shape_key(int hidden, int intermediate, int experts, int topk, jit::WeightFormat format,
                             std::string_view activation, int ep_size) {
    return ShapeKey{"moe_w4a16", "layer", hidden, intermediate, experts, topk,
                    fmt::format("{}/{}{}", jit::to_string(format), activation,
                                ep_size > 1 ? fmt::format("/ep{}", ep_size) : "")};
}

void apply_tuning_text(MoeW4A16Tuning& t, std::string_view text) {
    while (!text.empty()) {
        const size_t comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos)
            throw InvalidArgument(fmt::format("tuning '{}': expected name=value", item));
        set_tuning_field(t, item.substr(0, eq), item.substr(eq + 1));
    }
}

std::vector<MoeW4A16Window> moe_w4a16_windows(const TunedTables& tables, const ShapeKey& shape,
                                              jit::WeightFormat format, int max_tokens) {
    if (max_tokens < 1) throw InvalidArgument(fmt::format("moe_w4a16 windows: max_tokens={} (at least 1)", max_tokens));
    const MoeW4A16Tuning base = default_moe_w4a16_tuning(format);
    std::vector<MoeW4A16Window> out;
    for (const MWindow& w : tables.windows(shape)) {
        if (w.m_lo > max_tokens) break;
        MoeW4A16Window o;
        o.m_lo = w.m_lo;
        o.m_hi = std::min<int64_t>(w.m_hi, max_tokens);
        o.tuning = base;
        apply_tuning_text(o.tuning, w.config);
        validate(o.tuning);
        o.tuned = true;
        out.push_back(o);
    }
    if (out.empty()) {
        MoeW4A16Window o;
        o.m_lo = 1;
        o.m_hi = max_tokens;
        o.tuning = base;
        out.push_back(o);
    }
    out.back().m_hi = max_tokens;
    for (MoeW4A16Window& o : out) o.max_tokens = static_cast<int>(o.m_hi);
    return out;
}

}  // namespace kiln::autotune
