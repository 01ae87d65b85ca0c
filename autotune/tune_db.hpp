// The autotune DB: one SQLite file per GPU SKU (`kiln tune --out h200.tune.db`), written through the
// cache's SQLite wrapper, separate from the kernel cache.
//
//   meta          schema version, kiln version, the SKU's fields (sku.*), sweep progress and state
//   measurements  every timed point (shape, M, config) with its median, min, max and repetitions
//   m_windows     the fitted M-windows per shape: [m_lo, m_hi], the M-bucket, the winning config
//   toke_windows  the same windows over routed tokens per expert, with block_m and schedule
//   verify_cost   verify_cost[requests][tokens]: measured and monotone milliseconds
//
// The file carries application_id 'kltu' and user_version = k_tune_schema_version; a file of another
// application or a newer schema is refused (TuneDbError). A DB records its SKU when created; opening it
// for another SKU (for writing, or through TunedTables for dispatch) is refused with a message naming
// both SKUs and the field that differs. Each measurement commits on its own (BEGIN IMMEDIATE), so an
// interrupted sweep leaves every finished point in place and `--resume` continues from there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autotune/sku.hpp"
#include "autotune/tune_types.hpp"
#include "autotune/verify_cost.hpp"
#include "cache/sqlite_db.hpp"

namespace kiln::autotune {

constexpr int k_tune_schema_version = 1;

// A tune DB that cannot be used: not one, a newer schema, or another SKU's.
class TuneDbError : public Error {
public:
    using Error::Error;
};

class TuneDb {
public:
    // A new DB at `path` for `sku` (created atomically with its schema). Throws InvalidArgument when the
    // file exists.
    static TuneDb create(const std::string& path, const SkuIdentity& sku);
    // An existing DB, to continue writing; throws TuneDbError when it is not a tune DB or was made on
    // another SKU, NotFound when it does not exist.
    static TuneDb resume(const std::string& path, const SkuIdentity& sku);
    // Read-only (never written; any SKU). Throws NotFound / TuneDbError.
    static TuneDb open_read(const std::string& path);

    const std::string& path() const { return db_.file(); }
    const SkuIdentity& sku() const { return sku_; }
    // "" when `sku` may use this DB, else the message refusing it.
    std::string refusal(const SkuIdentity& sku) const;

    std::string meta(const std::string& key) const;  // "" when unset
    void set_meta(const std::string& key, const std::string& value);

    bool has_measurement(const ShapeKey& shape, int64_t m, const std::string& config) const;
    void put_measurement(const Measurement& m);  // replaces an equal point; commits at once
    std::vector<Measurement> measurements() const;  // ordered by shape, M, config
    std::vector<ShapeKey> shapes() const;           // the measured shapes

    // Replaces the windows of the shapes in `windows` (one transaction).
    void put_windows(const std::vector<MWindow>& windows, const std::vector<TokeWindow>& toke);
    std::vector<MWindow> m_windows() const;  // ordered by shape, m_lo
    std::vector<TokeWindow> toke_windows() const;

    void put_verify_cost(const VerifyCostTable& t);  // replaces the table
    std::optional<VerifyCostTable> verify_cost() const;

private:
    TuneDb(cache::Db db, bool writable);
    void load_sku();
    cache::Db db_;
    bool writable_ = false;
    SkuIdentity sku_;
};

}  // namespace kiln::autotune
