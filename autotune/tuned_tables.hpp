// What dispatch reads from a tune DB, once at start-up: every shape's M-windows as one flat array sorted by
// shape and M, plus the verification-cost table. Nothing here touches SQLite after load(), so layers may
// consult it while they plan; a layer resolves its windows when it is built, not per call.
//
// Without a DB (a default-constructed TunedTables) or without an entry for a shape, the documented
// heuristics of autotune/heuristics/ apply; in_force() says which, for `kiln info` and logs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autotune/heuristics/moe_w4a16.hpp"
#include "autotune/sku.hpp"
#include "autotune/tune_types.hpp"
#include "autotune/verify_cost.hpp"

namespace kiln::autotune {

class TuneDb;

class TunedTables {
public:
    TunedTables() = default;  // no DB: heuristics everywhere

    // Reads the DB at `path`. A DB measured on another SKU than `sku` is refused (TuneDbError naming both);
    // NotFound when the file does not exist.
    static TunedTables load(const std::string& path, const SkuIdentity& sku);
    // For building kernels of `target` on another machine (`kiln cache build`): the DB must have been
    // measured for that target ("sm_90a" against the DB's SKU target; "host" against a host SKU), else
    // TuneDbError naming both.
    static TunedTables load_for_target(const std::string& path, const std::string& target);

    bool empty() const { return windows_.empty(); }
    const std::string& path() const { return path_; }
    const SkuIdentity& sku() const { return sku_; }
    std::span<const MWindow> windows() const { return windows_; }
    // The windows of one shape, sorted by m_lo; empty when the DB has none for it.
    std::span<const MWindow> windows(const ShapeKey& shape) const;
    std::vector<ShapeKey> shapes() const;
    const std::optional<VerifyCostTable>& verify_cost() const { return verify_cost_; }

    // "tuned (DB)" or "heuristics (why)" for a shape.
    std::string in_force(const ShapeKey& shape) const;

private:
    static TunedTables from_db(const TuneDb& db);
    struct Range {
        ShapeKey shape;
        size_t first = 0, count = 0;
    };
    std::string path_;
    SkuIdentity sku_;
    std::vector<MWindow> windows_;  // sorted by shape, m_lo
    std::vector<Range> ranges_;     // sorted by shape
    std::optional<VerifyCostTable> verify_cost_;
};

// The ShapeKey of a moe_w4a16 layer: mode "layer", n = hidden, k = intermediate, e = local experts; the
// variant names the format, the activation and, above 1, the expert-parallel ranks ("mxfp4_g32_e8m0/situ_glu").
ShapeKey moe_w4a16_shape_key(int hidden, int intermediate, int experts, int topk, jit::WeightFormat format,
                             std::string_view activation, int ep_size = 1);

// One moe_w4a16 layer a server builds for a shape: calls of m_lo..m_hi tokens run on it; it holds up to
// max_tokens tokens per call (its kernels are built for that M-bucket) with `tuning`.
struct MoeW4A16Window {
    int64_t m_lo = 1, m_hi = 1;
    int max_tokens = 1;
    MoeW4A16Tuning tuning;
    bool tuned = false;  // from the DB; false: the heuristics
};

// The layers for calls of 1..max_tokens tokens: the DB's windows clipped to max_tokens (the last one
// reaching max_tokens), each window's config applied to the format's heuristics; without DB windows for
// the shape, one window with the heuristics. Throws InvalidArgument for max_tokens < 1 or a DB config
// naming an unknown tuning field.
std::vector<MoeW4A16Window> moe_w4a16_windows(const TunedTables& tables, const ShapeKey& shape,
                                              jit::WeightFormat format, int max_tokens);

// Applies "name=value,..." to `t` (set_tuning_field per item; "" changes nothing).
void apply_tuning_text(MoeW4A16Tuning& t, std::string_view text);

}  // namespace kiln::autotune
