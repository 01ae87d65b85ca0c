// The on-disk format shared by the user layer and prebuilt layers.
//
//   meta(name, value)          key_schema_version, builder, layer ("user" | "prebuilt"), created_at
//   artifacts(key PK, kind, family, mode, m, n, k, experts, weight_format, act_dtype, target, config,
//             kernel_name, compiler, compile_ms, size, sha256, xxh3, created_at, last_used, hits, use_seq,
//             blob)
//             indexed on the descriptor columns (for `kiln cache ls`) and on use_seq (LRU order)
//   manifest(...), signature(...)   prebuilt layers only (see manifest.hpp)
//
// sha256 is what manifests sign and prebuilt blobs are checked against; xxh3 (XXH3-128) is the fast
// check of the user layer's own blobs on every load (integrity, not authenticity: whoever can write
// the user DB can rewrite either column).
// PRAGMA application_id identifies a kiln cache; PRAGMA user_version is the schema version below.
// A file with another application_id is not ours; a newer user_version was written by a newer kiln.
#pragma once

#include <cstdint>
#include <string>

#include "cache/sqlite_db.hpp"
#include "cache/store.hpp"

namespace kiln::cache {

inline constexpr int32_t k_application_id = 0x4b494c4e;  // "KILN"
inline constexpr int64_t k_schema_version = 1;
inline constexpr int k_page_size = 16384;
// Page cache per connection (negative = KiB): large enough to hold a multi-MB cubin's pages.
inline constexpr int k_cache_size_pragma = -16384;

enum class SchemaState {
    empty,    // no tables yet: a new file
    current,  // ours, this version
    older,    // ours, an older version: migrate
    newer,    // ours, written by a newer kiln: leave it alone
    foreign,  // some other SQLite database
};

struct SchemaInfo {
    SchemaState state = SchemaState::empty;
    int64_t version = 0;
};

// Reads application_id, user_version and whether any table exists. Throws SqliteError on a
// damaged file.
SchemaInfo inspect_schema(const Db& db);

// Creates the tables of an empty file or migrates an older one, inside the caller's write
// transaction, and records `layer` in meta. Call only for states empty and older.
void install_schema(Db& db, const SchemaInfo& from, const std::string& layer);

// Columns read by read_info(), in order.
inline constexpr const char* k_info_columns =
    "key, kind, family, mode, m, n, k, experts, weight_format, act_dtype, target, config, kernel_name, "
    "compiler, compile_ms, size, sha256, created_at, last_used, hits";
inline constexpr int k_info_column_count = 20;
ArtifactInfo read_info(const Stmt& s, const std::string& file, int first = 0);  // throws CacheError on a bad row

ArtifactKind kind_from_int(int64_t v, const std::string& file);
std::string meta_value(const Db& db, const std::string& name);

}  // namespace kiln::cache
