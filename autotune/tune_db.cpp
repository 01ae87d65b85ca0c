#include "autotune/tune_db.hpp"

#include <sqlite3.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "kiln_config.h"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace kiln::autotune {

namespace fs = std::filesystem;

namespace {

constexpr int64_t k_application_id = 0x6B6C7475;  // 'kltu'

constexpr const char* k_schema = R"(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE measurements (
  family TEXT NOT NULL, mode TEXT NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, e INTEGER NOT NULL,
  topk INTEGER NOT NULL, variant TEXT NOT NULL, m INTEGER NOT NULL, config TEXT NOT NULL,
  block_m INTEGER NOT NULL, schedule TEXT NOT NULL,
  median_us REAL NOT NULL, min_us REAL NOT NULL, max_us REAL NOT NULL, reps INTEGER NOT NULL,
  bytes REAL NOT NULL, measured_at INTEGER NOT NULL,
  PRIMARY KEY (family, mode, n, k, e, topk, variant, m, config));
CREATE TABLE m_windows (
  family TEXT NOT NULL, mode TEXT NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, e INTEGER NOT NULL,
  topk INTEGER NOT NULL, variant TEXT NOT NULL, m_lo INTEGER NOT NULL, m_hi INTEGER NOT NULL,
  bucket INTEGER NOT NULL, config TEXT NOT NULL, block_m INTEGER NOT NULL, schedule TEXT NOT NULL, us REAL NOT NULL,
  PRIMARY KEY (family, mode, n, k, e, topk, variant, m_lo));
CREATE TABLE toke_windows (
  family TEXT NOT NULL, mode TEXT NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, e INTEGER NOT NULL,
  topk INTEGER NOT NULL, variant TEXT NOT NULL, tok_lo REAL NOT NULL, tok_hi REAL NOT NULL,
  block_m INTEGER NOT NULL, schedule TEXT NOT NULL, config TEXT NOT NULL,
  PRIMARY KEY (family, mode, n, k, e, topk, variant, tok_lo));
CREATE TABLE verify_cost (
  requests INTEGER NOT NULL, tokens INTEGER NOT NULL, measured_ms REAL NOT NULL, ms REAL NOT NULL,
  PRIMARY KEY (requests, tokens));
)";

constexpr const char* k_shape_cols = "family, mode, n, k, e, topk, variant";
constexpr const char* k_shape_match = "family=?1 AND mode=?2 AND n=?3 AND k=?4 AND e=?5 AND topk=?6 AND variant=?7";

void bind_shape(cache::Stmt& s, const ShapeKey& k) {
    s.bind(1, std::string_view(k.family)).bind(2, std::string_view(k.mode)).bind(3, k.n).bind(4, k.k).bind(5, k.e);
    s.bind(6, k.topk).bind(7, std::string_view(k.variant));
}

ShapeKey read_shape(const cache::Stmt& s) {
    return ShapeKey{s.text(0), s.text(1), s.i64(2), s.i64(3), s.i64(4), s.i64(5), s.text(6)};
}

void check_schema(const cache::Db& db) {
    const int64_t app = db.scalar_i64("PRAGMA application_id");
    const int64_t version = db.scalar_i64("PRAGMA user_version");
    if (app != k_application_id)
        throw TuneDbError(fmt::format("{} is not a kiln tune DB (application_id {:#x})", db.file(), app));
    if (version != k_tune_schema_version)
        throw TuneDbError(fmt::format("{} has tune DB schema version {}; this kiln reads version {}", db.file(), version,
                                      k_tune_schema_version));
}

cache::Db open_existing(const std::string& path, bool writable) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw NotFound(fmt::format("tune DB {} does not exist", path));
    try {
        cache::Db db = writable ? cache::Db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, path)
                                : cache::Db(cache::sqlite_uri(fs::absolute(path).string(), "mode=ro"),
                                            SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, path);
        if (writable) db.exec("PRAGMA busy_timeout = 10000");
        check_schema(db);
        return db;
    } catch (const cache::SqliteError& e) {
        if (e.is_damage()) throw TuneDbError(fmt::format("{} is not a kiln tune DB ({})", path, e.what()));
        throw;
    }
}

int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void write_sku_meta(cache::Db& db, const SkuIdentity& s) {
    cache::Stmt put = db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
    auto kv = [&](const char* k, const std::string& v) { put.bind(1, std::string_view(k)).bind(2, std::string_view(v)).run(); };
    kv("sku.kind", s.kind);
    kv("sku.name", s.name);
    kv("sku.compute_units", std::to_string(s.compute_units));
    kv("sku.memory_bytes", std::to_string(s.memory_bytes));
    kv("sku.target", s.target);
    kv("sku.clock_khz", std::to_string(s.clock_khz));
    kv("sku.cache_bytes", std::to_string(s.cache_bytes));
    kv("sku.driver", s.driver);
    kv("sku.nvrtc", s.nvrtc);
    kv("sku.llvm", s.llvm);
    kv("kiln_version", KILN_VERSION);
    kv("created_at", std::to_string(now_s()));
}

}  // namespace

TuneDb::TuneDb(cache::Db db, bool writable) : db_(std::move(db)), writable_(writable) { load_sku(); }

void TuneDb::load_sku() {
    auto num = [&](const char* k) -> int64_t {
        const std::string v = meta(k);
        try {
            return v.empty() ? 0 : std::stoll(v);
        } catch (const std::exception&) {
            throw TuneDbError(fmt::format("{}: meta {}='{}' is not a number", db_.file(), k, v));
        }
    };
    sku_.kind = meta("sku.kind");
    sku_.name = meta("sku.name");
    sku_.compute_units = static_cast<int>(num("sku.compute_units"));
    sku_.memory_bytes = static_cast<uint64_t>(num("sku.memory_bytes"));
    sku_.target = meta("sku.target");
    sku_.clock_khz = static_cast<int>(num("sku.clock_khz"));
    sku_.cache_bytes = static_cast<uint64_t>(num("sku.cache_bytes"));
    sku_.driver = meta("sku.driver");
    sku_.nvrtc = meta("sku.nvrtc");
    sku_.llvm = meta("sku.llvm");
    if (sku_.kind.empty()) throw TuneDbError(fmt::format("{} records no SKU", db_.file()));
}

TuneDb TuneDb::create(const std::string& path, const SkuIdentity& sku) {
    std::error_code ec;
    if (fs::exists(path, ec))
        throw InvalidArgument(fmt::format("{} exists (continue it with --resume, or remove it)", path));
    const std::string tmp = kiln::temp_sibling(path);
    {
        cache::Db db(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, path);
        db.exec("PRAGMA journal_mode = DELETE");
        cache::WriteTxn txn(db);
        db.exec(k_schema);
        write_sku_meta(db, sku);
        db.exec(fmt::format("PRAGMA application_id = {}", k_application_id));
        db.exec(fmt::format("PRAGMA user_version = {}", k_tune_schema_version));
        txn.commit();
    }
    kiln::publish_file(tmp, path);
    return resume(path, sku);
}

TuneDb TuneDb::resume(const std::string& path, const SkuIdentity& sku) {
    TuneDb db(open_existing(path, true), true);
    if (const std::string why = db.refusal(sku); !why.empty()) throw TuneDbError(why);
    return db;
}

TuneDb TuneDb::open_read(const std::string& path) { return TuneDb(open_existing(path, false), false); }

std::string TuneDb::refusal(const SkuIdentity& sku) const {
    const std::string d = sku_.difference(sku);
    if (d.empty()) return "";
    return fmt::format("{} was tuned on another SKU ({}; this machine: {}): {}; run kiln tune on this machine",
                       db_.file(), sku_.summary(), sku.summary(), d);
}

std::string TuneDb::meta(const std::string& key) const {
    cache::Stmt s = db_.prepare("SELECT value FROM meta WHERE key = ?1");
    s.bind(1, std::string_view(key));
    return s.step() ? s.text(0) : "";
}

void TuneDb::set_meta(const std::string& key, const std::string& value) {
    cache::Stmt s = db_.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
    s.bind(1, std::string_view(key)).bind(2, std::string_view(value)).run();
}

bool TuneDb::has_measurement(const ShapeKey& shape, int64_t m, const std::string& config) const {
    cache::Stmt s = db_.prepare(fmt::format("SELECT 1 FROM measurements WHERE {} AND m=?8 AND config=?9", k_shape_match));
    bind_shape(s, shape);
    s.bind(8, m).bind(9, std::string_view(config));
    return s.step();
}

void TuneDb::put_measurement(const Measurement& m) {
    cache::WriteTxn txn(db_);
    cache::Stmt s = db_.prepare(fmt::format(
        "INSERT OR REPLACE INTO measurements({}, m, config, block_m, schedule, median_us, min_us, max_us, reps, "
        "bytes, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        k_shape_cols));
    bind_shape(s, m.shape);
    s.bind(8, m.m).bind(9, std::string_view(m.config)).bind(10, static_cast<int64_t>(m.block_m));
    s.bind(11, std::string_view(m.schedule)).bind(12, m.median_us).bind(13, m.min_us).bind(14, m.max_us);
    s.bind(15, static_cast<int64_t>(m.reps)).bind(16, m.bytes).bind(17, now_s());
    s.run();
    txn.commit();
}

std::vector<Measurement> TuneDb::measurements() const {
    cache::Stmt s = db_.prepare(fmt::format(
        "SELECT {0}, m, config, block_m, schedule, median_us, min_us, max_us, reps, bytes FROM measurements "
        "ORDER BY {0}, m, config",
        k_shape_cols));
    std::vector<Measurement> out;
    while (s.step()) {
        Measurement m;
        m.shape = read_shape(s);
        m.m = s.i64(7);
        m.config = s.text(8);
        m.block_m = static_cast<int>(s.i64(9));
        m.schedule = s.text(10);
        m.median_us = s.f64(11);
        m.min_us = s.f64(12);
        m.max_us = s.f64(13);
        m.reps = static_cast<int>(s.i64(14));
        m.bytes = s.f64(15);
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<ShapeKey> TuneDb::shapes() const {
    cache::Stmt s = db_.prepare(fmt::format("SELECT DISTINCT {0} FROM measurements ORDER BY {0}", k_shape_cols));
    std::vector<ShapeKey> out;
    while (s.step()) out.push_back(read_shape(s));
    return out;
}

void TuneDb::put_windows(const std::vector<MWindow>& windows, const std::vector<TokeWindow>& toke) {
    cache::WriteTxn txn(db_);
    cache::Stmt del_m = db_.prepare(fmt::format("DELETE FROM m_windows WHERE {}", k_shape_match));
    cache::Stmt del_t = db_.prepare(fmt::format("DELETE FROM toke_windows WHERE {}", k_shape_match));
    auto clear = [&](const ShapeKey& k) {
        bind_shape(del_m, k);
        del_m.run();
        bind_shape(del_t, k);
        del_t.run();
    };
    for (const MWindow& w : windows) clear(w.shape);
    for (const TokeWindow& w : toke) clear(w.shape);
    cache::Stmt put_m = db_.prepare(fmt::format(
        "INSERT INTO m_windows({}, m_lo, m_hi, bucket, config, block_m, schedule, us) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        k_shape_cols));
    for (const MWindow& w : windows) {
        bind_shape(put_m, w.shape);
        put_m.bind(8, w.m_lo).bind(9, w.m_hi).bind(10, w.bucket).bind(11, std::string_view(w.config));
        put_m.bind(12, static_cast<int64_t>(w.block_m)).bind(13, std::string_view(w.schedule)).bind(14, w.us);
        put_m.run();
    }
    cache::Stmt put_t = db_.prepare(fmt::format(
        "INSERT INTO toke_windows({}, tok_lo, tok_hi, block_m, schedule, config) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        k_shape_cols));
    for (const TokeWindow& w : toke) {
        bind_shape(put_t, w.shape);
        put_t.bind(8, w.tok_lo).bind(9, w.tok_hi).bind(10, static_cast<int64_t>(w.block_m));
        put_t.bind(11, std::string_view(w.schedule)).bind(12, std::string_view(w.config));
        put_t.run();
    }
    txn.commit();
}

std::vector<MWindow> TuneDb::m_windows() const {
    cache::Stmt s = db_.prepare(fmt::format(
        "SELECT {0}, m_lo, m_hi, bucket, config, block_m, schedule, us FROM m_windows ORDER BY {0}, m_lo", k_shape_cols));
    std::vector<MWindow> out;
    while (s.step()) {
        MWindow w;
        w.shape = read_shape(s);
        w.m_lo = s.i64(7);
        w.m_hi = s.i64(8);
        w.bucket = s.i64(9);
        w.config = s.text(10);
        w.block_m = static_cast<int>(s.i64(11));
        w.schedule = s.text(12);
        w.us = s.f64(13);
        out.push_back(std::move(w));
    }
    return out;
}

std::vector<TokeWindow> TuneDb::toke_windows() const {
    cache::Stmt s = db_.prepare(fmt::format(
        "SELECT {0}, tok_lo, tok_hi, block_m, schedule, config FROM toke_windows ORDER BY {0}, tok_lo", k_shape_cols));
    std::vector<TokeWindow> out;
    while (s.step()) {
        TokeWindow w;
        w.shape = read_shape(s);
        w.tok_lo = s.f64(7);
        w.tok_hi = s.f64(8);
        w.block_m = static_cast<int>(s.i64(9));
        w.schedule = s.text(10);
        w.config = s.text(11);
        out.push_back(std::move(w));
    }
    return out;
}

void TuneDb::put_verify_cost(const VerifyCostTable& t) {
    const size_t C = t.tokens.size();
    if (t.measured_ms.size() != t.requests.size() * C || t.ms.size() != t.measured_ms.size())
        throw InvalidArgument("put_verify_cost: the table's values do not match its axes");
    cache::WriteTxn txn(db_);
    db_.exec("DELETE FROM verify_cost");
    cache::Stmt s = db_.prepare("INSERT INTO verify_cost(requests, tokens, measured_ms, ms) VALUES (?1, ?2, ?3, ?4)");
    for (size_t r = 0; r < t.requests.size(); ++r)
        for (size_t c = 0; c < C; ++c)
            s.bind(1, static_cast<int64_t>(t.requests[r])).bind(2, static_cast<int64_t>(t.tokens[c]))
                .bind(3, t.measured(r, c)).bind(4, t.at(r, c)).run();
    txn.commit();
}

std::optional<VerifyCostTable> TuneDb::verify_cost() const {
    cache::Stmt s = db_.prepare("SELECT requests, tokens, measured_ms, ms FROM verify_cost ORDER BY requests, tokens");
    VerifyCostTable t;
    std::vector<std::tuple<int, int, double, double>> rows;
    while (s.step())
        rows.emplace_back(static_cast<int>(s.i64(0)), static_cast<int>(s.i64(1)), s.f64(2), s.f64(3));
    if (rows.empty()) return std::nullopt;
    for (const auto& [r, k, meas, ms] : rows) {
        if (t.requests.empty() || t.requests.back() != r) t.requests.push_back(r);
        if (t.requests.size() == 1) t.tokens.push_back(k);
        t.measured_ms.push_back(meas);
        t.ms.push_back(ms);
    }
    if (t.measured_ms.size() != t.requests.size() * t.tokens.size())
        throw TuneDbError(fmt::format("{}: the verify_cost table is not a full grid", db_.file()));
    return t;
}

}  // namespace kiln::autotune
