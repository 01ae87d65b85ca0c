// The per-user layer: <cache_dir>/kernels.db, SQLite in WAL mode on a node-local disk.
//
// Opening never throws for storage problems: a damaged file (garbage, truncated, another program's
// DB, failed quick_check) is moved aside to kernels.db.corrupt-<timestamp> and rebuilt; a directory
// or disk that cannot take writes leaves the layer readable (if a DB exists) but disables caching.
// Where the directory cannot hold the WAL files (a read-only mount), the DB is read as immutable.
// Maintenance writes (clear, prune, import) on a cache that cannot be written throw CacheError
// naming the reason.
// Each of these raises one warning. Writes are BEGIN IMMEDIATE + INSERT OR IGNORE; a full disk
// (SQLITE_FULL, I/O errors, read-only files) during a write disables caching for the rest of the
// process. Hit counts and last-use times are buffered in memory and written at most every
// `k_touch_flush_interval` (and on flush()/destruction), so reads do not turn into writes.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/file_lock.hpp"
#include "cache/prebuilt_layer.hpp"
#include "cache/signing.hpp"
#include "cache/sqlite_db.hpp"
#include "cache/store.hpp"
#include "cache/warnings.hpp"

namespace kiln::cache {

inline constexpr auto k_touch_flush_interval = std::chrono::seconds(30);
// quick_check reads every page: it runs at open up to this size, and at any size after a process
// met a damaged page at run time (it leaves kernels.db.needs-check behind). `kiln cache verify`
// always runs the full integrity_check.
inline constexpr uint64_t k_quick_check_limit = 256ull << 20;

class UserLayer {
public:
    struct Options {
        std::string dir;
        uint64_t max_bytes = 0;         // LRU cap on the sum of blob sizes
        uint64_t hard_limit_bytes = 0;  // PRAGMA max_page_count ceiling; 0 = none
        bool read_only = false;
    };
    UserLayer(Options opts, WarningSink& warnings);
    ~UserLayer();
    UserLayer(const UserLayer&) = delete;
    UserLayer& operator=(const UserLayer&) = delete;

    const std::string& db_path() const { return path_; }
    bool readable() const { return static_cast<bool>(db_); }
    bool writable() const { return writable_.load(); }
    std::string disabled_reason() const {
        std::lock_guard<std::mutex> lock(mu_);
        return disabled_reason_;
    }
    uint64_t max_bytes() const { return opts_.max_bytes; }

    // A blob whose digest does not match its row is deleted (with a warning) and reported as a miss.
    std::optional<Artifact> get(const ContentKey& key, ArtifactKind kind);
    // `info.sha256` and `info.bytes` must describe `blob`.
    bool put(const ArtifactInfo& info, std::span<const uint8_t> blob);
    void flush();

    std::vector<ArtifactInfo> list();
    std::vector<ArtifactInfo> find_prefix(const std::string& hex_prefix);  // at most 2
    uint64_t total_bytes();
    uint64_t file_bytes() const;  // DB + WAL on disk
    uint64_t prune(uint64_t max_bytes);
    void clear();
    void verify(uint64_t& checked, std::vector<std::string>& problems);
    void export_to(const std::string& file, const SigningKey* key);
    uint64_t import_from(PrebuiltLayer& layer);

private:
    struct Damaged {
        std::string why;
    };
    struct Pending {
        int64_t hits = 0;
        int64_t last_used = 0;
        uint64_t order = 0;
    };

    void open();
    FileLock open_lock();
    bool open_locked(bool check);  // false when the layer ended up unusable or rebuilt empty
    void open_db();                // throws SqliteError or Damaged
    std::string quick_check();     // "" when ok
    std::string check_marker() const;
    bool needs_check() const;
    void clear_check_marker();
    void on_damage(const SqliteError& e);
    void open_read_only();
    void recover(const std::string& why);
    void close_db();
    void disable(const std::string& why);
    void on_write_error(const SqliteError& e, const char* doing);
    bool insert_locked(const ArtifactInfo& info, std::span<const uint8_t> blob);
    uint64_t prune_locked(uint64_t max_bytes);
    void flush_locked();
    uint64_t total_locked();

    Options opts_;
    WarningSink& warnings_;
    std::string path_;
    mutable std::mutex mu_;  // guards the connection, its statements, pending_ and disabled_reason_
    Db db_;
    Stmt get_, insert_, touch_, delete_;
    std::atomic<bool> writable_{false};
    std::string disabled_reason_;
    std::unordered_map<ContentKey, Pending, ContentKeyHash> pending_;
    uint64_t pending_order_ = 0;
    std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

}  // namespace kiln::cache
