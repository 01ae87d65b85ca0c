#include "cache/schema.hpp"

#include <chrono>

#include <fmt/format.h>

#include "kiln_config.h"

namespace kiln::cache {

static const char* const k_schema_v1 = R"sql(
CREATE TABLE IF NOT EXISTS meta(
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS artifacts(
  key           TEXT PRIMARY KEY,
  kind          INTEGER NOT NULL,
  family        TEXT NOT NULL,
  mode          TEXT NOT NULL,
  m             INTEGER NOT NULL,
  n             INTEGER NOT NULL,
  k             INTEGER NOT NULL,
  experts       INTEGER NOT NULL,
  weight_format TEXT NOT NULL,
  act_dtype     TEXT NOT NULL,
  target        TEXT NOT NULL,
  config        TEXT NOT NULL,
  kernel_name   TEXT NOT NULL,
  compiler      TEXT NOT NULL,
  compile_ms    REAL NOT NULL,
  size          INTEGER NOT NULL,
  sha256        TEXT NOT NULL,
  xxh3          TEXT NOT NULL,
  created_at    INTEGER NOT NULL,
  last_used     INTEGER NOT NULL,
  hits          INTEGER NOT NULL,
  use_seq       INTEGER NOT NULL,
  blob          BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_descriptor ON artifacts(family, mode, m, n, k, experts, target);
CREATE INDEX IF NOT EXISTS artifacts_lru ON artifacts(use_seq);
)sql";

SchemaInfo inspect_schema(const Db& db) {
    SchemaInfo info;
    int64_t app = db.scalar_i64("PRAGMA application_id");
    info.version = db.scalar_i64("PRAGMA user_version");
    int64_t tables = db.scalar_i64("SELECT count(*) FROM sqlite_schema");
    if (app == 0 && info.version == 0 && tables == 0) info.state = SchemaState::empty;
    else if (app != k_application_id) info.state = SchemaState::foreign;
    else if (info.version == k_schema_version) info.state = SchemaState::current;
    else if (info.version < k_schema_version) info.state = SchemaState::older;
    else info.state = SchemaState::newer;
    return info;
}

void install_schema(Db& db, const SchemaInfo& from, const std::string& layer) {
    // Migrations go here as `if (from.version < N) { ... }` steps once a version 2 exists; version 1
    // is the first format, so an "older" file can only be one whose creation was interrupted.
    (void)from;
    db.exec(k_schema_v1);
    db.exec(fmt::format("PRAGMA application_id = {}", k_application_id));
    db.exec(fmt::format("PRAGMA user_version = {}", k_schema_version));
    Stmt put = db.prepare("INSERT OR REPLACE INTO meta(name, value) VALUES(?1, ?2)");
    auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    put.bind(1, "key_schema_version").bind(2, fmt::format("{}", k_key_schema_version)).run();
    put.bind(1, "builder").bind(2, std::string("kiln ") + KILN_VERSION).run();
    put.bind(1, "layer").bind(2, layer).run();
    put.bind(1, "created_at").bind(2, fmt::format("{}", now.count())).run();
}

ArtifactKind kind_from_int(int64_t v, const std::string& file) {
    if (v == static_cast<int64_t>(ArtifactKind::cubin)) return ArtifactKind::cubin;
    if (v == static_cast<int64_t>(ArtifactKind::host_object)) return ArtifactKind::host_object;
    throw CacheError(fmt::format("{}: unknown artifact kind {}", file, v));
}

ArtifactInfo read_info(const Stmt& s, const std::string& file, int c) {
    ArtifactInfo a;
    try {
        a.key = ContentKey::parse(s.text(c + 0));
    } catch (const InvalidArgument&) {
        throw CacheError(fmt::format("{}: malformed key '{}' in artifacts", file, s.text(c + 0)));
    }
    a.kind = kind_from_int(s.i64(c + 1), file);
    a.family = s.text(c + 2);
    a.mode = s.text(c + 3);
    a.m = s.i64(c + 4);
    a.n = s.i64(c + 5);
    a.k = s.i64(c + 6);
    a.experts = s.i64(c + 7);
    a.weight_format = s.text(c + 8);
    a.act_dtype = s.text(c + 9);
    a.target = s.text(c + 10);
    a.config = s.text(c + 11);
    a.kernel_name = s.text(c + 12);
    a.compiler = s.text(c + 13);
    a.compile_ms = s.f64(c + 14);
    a.bytes = static_cast<uint64_t>(s.i64(c + 15));
    a.sha256 = s.text(c + 16);
    a.created_at = s.i64(c + 17);
    a.last_used = s.i64(c + 18);
    a.hits = s.i64(c + 19);
    return a;
}

std::string meta_value(const Db& db, const std::string& name) {
    Stmt s = db.prepare("SELECT value FROM meta WHERE name = ?1");
    s.bind(1, name);
    return s.step() ? s.text(0) : std::string();
}

}  // namespace kiln::cache
