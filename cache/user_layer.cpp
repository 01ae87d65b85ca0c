#include "cache/user_layer.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "runtime/atomic_file.hpp"
#include "cache/digest.hpp"
#include "cache/file_lock.hpp"
#include "cache/manifest.hpp"
#include "cache/schema.hpp"
#include "runtime/log.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;

static int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

static std::string timestamp_utc() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
}

static uint64_t size_or_zero(const std::string& path) {
    std::error_code ec;
    auto n = fs::file_size(path, ec);
    return ec ? 0 : n;
}

UserLayer::UserLayer(Options opts, WarningSink& warnings) : opts_(std::move(opts)), warnings_(warnings) {
    path_ = (fs::path(opts_.dir) / "kernels.db").string();
    open();
}

UserLayer::~UserLayer() {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
    close_db();
}

void UserLayer::close_db() {
    get_ = Stmt();
    insert_ = Stmt();
    touch_ = Stmt();
    delete_ = Stmt();
    db_.close();
}

void UserLayer::disable(const std::string& why) {
    if (writable_.exchange(false) || disabled_reason_.empty()) {
        disabled_reason_ = why;
        warnings_.warn_once("user-layer-disabled",
                            fmt::format("kernel caching disabled: {}; kernels are still compiled and used, but not stored",
                                        why));
    }
}

void UserLayer::on_write_error(const SqliteError& e, const char* doing) {
    if (e.is_damage()) {
        on_damage(e);
        return;
    }
    if (e.primary() == SQLITE_BUSY || e.primary() == SQLITE_LOCKED) {
        warnings_.warn(fmt::format("{}: {} skipped, the cache DB stayed busy: {}", path_, doing, e.what()));
        return;
    }
    disable(fmt::format("cannot write {} ({})", path_, e.what()));
}

void UserLayer::open() {
    if (opts_.read_only) {
        disabled_reason_ = "read-only (--cache-read-only / KILN_CACHE_READ_ONLY)";
        open_read_only();
        return;
    }
    std::error_code ec;
    fs::create_directories(opts_.dir, ec);
    if (ec) {
        open_read_only();
        disable(fmt::format("cannot create the cache directory {} ({})", opts_.dir, ec.message()));
        return;
    }
    if (::access(opts_.dir.c_str(), W_OK) != 0) {
        // A read-only mount or an unwritable directory: use what is there, write nothing.
        const std::string why = std::strerror(errno);
        open_read_only();
        disable(fmt::format("the cache directory {} cannot be written ({})", opts_.dir, why));
        return;
    }
    // Creating the file, switching it to WAL and recovering it are serialised between processes:
    // SQLite answers some of those transitions with SQLITE_BUSY without waiting. The quick_check,
    // which reads the whole file, runs outside the lock; only a failed one takes it again.
    if (!open_locked(false)) return;
    if (size_t n = FileLock::remove_unheld((fs::path(opts_.dir) / "locks").string(), ".lock"))
        log::info("{}: removed {} lock files left by processes that were killed", opts_.dir, n);
    if (!needs_check()) return;
    std::string problem;
    {
        std::lock_guard<std::mutex> lock(mu_);
        try {
            problem = quick_check();
        } catch (const SqliteError& e) {
            problem = e.what();
        }
    }
    if (problem.empty()) {
        clear_check_marker();
        return;
    }
    log::info("{}: quick_check failed ({}); re-checking under the open lock", path_, problem);
    open_locked(true);
}

FileLock UserLayer::open_lock() {
    try {
        return FileLock::acquire((fs::path(opts_.dir) / "locks" / "open.lock").string(), std::chrono::seconds(60));
    } catch (const IoError& e) {
        log::debug("{}: opening without the open lock: {}", path_, e.what());
        return FileLock();
    }
}

bool UserLayer::open_locked(bool check) {
    FileLock guard = open_lock();
    for (int attempt = 1;; ++attempt) {
        try {
            open_db();
            if (!db_) return false;  // left alone (a newer kiln's file)
            if (check) {
                std::string problem = quick_check();
                if (!problem.empty()) throw Damaged{"quick_check: " + problem};
                clear_check_marker();
            }
            return true;
        } catch (const Damaged& d) {
            recover(d.why);
            return false;
        } catch (const SqliteError& e) {
            if (e.is_damage()) {
                recover(e.what());
                return false;
            }
            if (e.primary() == SQLITE_BUSY && attempt < 5) {
                close_db();
                std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
                continue;
            }
            close_db();
            open_read_only();
            disable(fmt::format("cannot open {} for writing ({})", path_, e.what()));
            return false;
        }
    }
}

std::string UserLayer::check_marker() const { return path_ + ".needs-check"; }

bool UserLayer::needs_check() const {
    std::error_code ec;
    return size_or_zero(path_) <= k_quick_check_limit || fs::exists(check_marker(), ec);
}

void UserLayer::clear_check_marker() {
    std::error_code ec;
    fs::remove(check_marker(), ec);
}

void UserLayer::on_damage(const SqliteError& e) {
    // Checked (and if need be rebuilt) by the next process that opens the cache, whatever its size.
    try {
        write_file_atomic(check_marker(), e.what());
    } catch (const Error& err) {
        log::debug("{}: {}", path_, err.what());
    }
    disable(fmt::format("{} is damaged ({}); it will be checked and rebuilt when kiln next starts", path_, e.what()));
}

std::string UserLayer::quick_check() {
    Stmt qc = db_.prepare("PRAGMA quick_check");
    std::string first;
    if (qc.step()) first = qc.text(0);
    return first == "ok" ? std::string() : first;
}

void UserLayer::open_db() {
    close_db();
    db_ = Db(path_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, path_);
    sqlite3_busy_timeout(db_.raw(), 10000);
    db_.exec(fmt::format("PRAGMA cache_size = {}", k_cache_size_pragma));
    // Only for a new file: on an existing one, PRAGMA auto_vacuum would write page 1 on every open.
    if (db_.scalar_i64("PRAGMA page_count") == 0)
        db_.exec(fmt::format("PRAGMA page_size = {}; PRAGMA auto_vacuum = INCREMENTAL;", k_page_size));
    {
        WriteTxn txn(db_);
        SchemaInfo schema = inspect_schema(db_);
        switch (schema.state) {
        case SchemaState::foreign:
            throw Damaged{"not a kiln cache DB (unknown application_id)"};
        case SchemaState::newer:
            // Written by a newer kiln sharing this directory: leave it alone.
            close_db();
            disable(fmt::format("{} was written by a newer kiln (schema {}, this one knows {})", path_, schema.version,
                                k_schema_version));
            return;
        case SchemaState::empty:
        case SchemaState::older:
            install_schema(db_, schema, "user");
            break;
        case SchemaState::current:
            if (meta_value(db_, "layer") != "user") throw Damaged{"not a user cache DB (a prebuilt layer copied here?)"};
            break;
        }
        txn.commit();
    }
    std::string mode = db_.scalar_text("PRAGMA journal_mode = WAL");
    if (mode != "wal") log::debug("{}: journal_mode stays {}", path_, mode);
    db_.exec("PRAGMA synchronous = NORMAL");
    if (opts_.hard_limit_bytes > 0)
        db_.exec(fmt::format("PRAGMA max_page_count = {}", std::max<uint64_t>(1, opts_.hard_limit_bytes / k_page_size)));
    get_ = db_.prepare(fmt::format("SELECT rowid, xxh3, {} FROM artifacts WHERE key = ?1", k_info_columns));
    insert_ = db_.prepare(
        "INSERT OR IGNORE INTO artifacts(key, kind, family, mode, m, n, k, experts, weight_format, act_dtype, target, "
        "config, kernel_name, compiler, compile_ms, size, sha256, xxh3, created_at, last_used, hits, use_seq, blob) "
        "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?20,?18,?18,0,"
        "(SELECT coalesce(max(use_seq), 0) + 1 FROM artifacts),?19)");
    touch_ = db_.prepare(
        "UPDATE artifacts SET hits = hits + ?2, last_used = max(last_used, ?3), "
        "use_seq = (SELECT max(use_seq) FROM artifacts) + 1 WHERE key = ?1");
    delete_ = db_.prepare("DELETE FROM artifacts WHERE key = ?1");
    writable_ = true;
}

void UserLayer::open_read_only() {
    std::error_code ec;
    if (!fs::is_regular_file(path_, ec)) return;
    const std::string abs = fs::absolute(path_, ec).lexically_normal().string();
    auto try_open = [&](const char* query) {
        db_ = Db(sqlite_uri(abs, query), SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, path_);
        sqlite3_busy_timeout(db_.raw(), 10000);
        db_.exec(fmt::format("PRAGMA cache_size = {}", k_cache_size_pragma));
        SchemaInfo schema = inspect_schema(db_);
        if (schema.state != SchemaState::current) {
            close_db();
            warnings_.warn_once("user-layer-unreadable",
                                fmt::format("{}: not a cache DB this kiln can read; ignoring it", path_));
            return;
        }
        get_ = db_.prepare(fmt::format("SELECT rowid, xxh3, {} FROM artifacts WHERE key = ?1", k_info_columns));
    };
    try {
        try_open("mode=ro");
        return;
    } catch (const SqliteError& e) {
        close_db();
        // Reading a WAL database needs its -shm (and -wal) beside it; where the directory cannot hold
        // them (a read-only mount), nothing can write the file either, so it is read as immutable.
        if (::access(opts_.dir.c_str(), W_OK) == 0) {
            warnings_.warn_once("user-layer-unreadable",
                                fmt::format("{}: cannot be read ({}); ignoring it", path_, e.what()));
            return;
        }
    }
    try {
        try_open("mode=ro&immutable=1");
        log::info("{}: the cache directory cannot be written; reading the cache as immutable", path_);
    } catch (const SqliteError& e) {
        close_db();
        warnings_.warn_once("user-layer-unreadable", fmt::format("{}: cannot be read ({}); ignoring it", path_, e.what()));
    }
}

void UserLayer::recover(const std::string& why) {
    // Runs under open()'s lock, so no other process is rebuilding the file at the same time.
    close_db();
    std::string aside = path_ + ".corrupt-" + timestamp_utc();
    for (int i = 1; fs::exists(aside); ++i) aside = fmt::format("{}.corrupt-{}-{}", path_, timestamp_utc(), i);
    std::error_code ec;
    fs::rename(path_, aside, ec);
    if (ec) {
        disable(fmt::format("{} is damaged ({}) and cannot be moved aside ({})", path_, why, ec.message()));
        return;
    }
    if (fs::exists(path_ + "-wal")) fs::rename(path_ + "-wal", aside + "-wal", ec);
    fs::remove(path_ + "-shm", ec);
    clear_check_marker();
    warnings_.warn(fmt::format("kernel cache {} was damaged ({}); moved it to {} and started an empty cache", path_,
                               why, aside));
    try {
        open_db();
    } catch (const Damaged& d) {
        close_db();
        disable(fmt::format("{} cannot be rebuilt ({})", path_, d.why));
    } catch (const SqliteError& e) {
        close_db();
        disable(fmt::format("{} cannot be rebuilt ({})", path_, e.what()));
    }
}

std::optional<Artifact> UserLayer::get(const ContentKey& key, ArtifactKind kind) {
    Artifact a;
    std::string stored_xxh3;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!db_) return std::nullopt;
        try {
            get_.bind(1, key.hex());
            if (!get_.step()) {
                get_.reset();
                return std::nullopt;
            }
            a.info = read_info(get_, path_, 2);
            if (a.info.kind != kind) {
                get_.reset();
                return std::nullopt;
            }
            stored_xxh3 = get_.text(1);
            db_.read_blob("artifacts", "blob", get_.i64(0), a.blob);
            get_.reset();
        } catch (const SqliteError& e) {
            get_.reset();
            if (e.is_damage()) on_damage(e);
            else warnings_.warn_once("user-read-" + key.hex(), fmt::format("{}: key {}: cannot be read ({})", path_, key.hex(), e.what()));
            return std::nullopt;
        } catch (const Error& e) {
            get_.reset();
            warnings_.warn_once("user-read-" + key.hex(), fmt::format("{}: key {}: cannot be read ({})", path_, key.hex(), e.what()));
            return std::nullopt;
        }
    }
    if (a.blob.size() != a.info.bytes || xxh3_128_hex(a.blob) != stored_xxh3) {
        warnings_.warn(fmt::format("{}: key {}: stored blob does not match its checksum; dropped it, it will be rebuilt",
                                   path_, key.hex()));
        std::lock_guard<std::mutex> lock(mu_);
        if (writable_) {
            try {
                WriteTxn txn(db_);
                delete_.bind(1, key.hex());
                delete_.run();
                txn.commit();
            } catch (const SqliteError& e) {
                delete_.reset();
                on_write_error(e, "dropping a damaged row");
            }
        }
        return std::nullopt;
    }
    a.info.layer = "user";
    std::lock_guard<std::mutex> lock(mu_);
    if (writable_) {
        Pending& p = pending_[key];
        p.hits += 1;
        p.last_used = unix_now();
        p.order = ++pending_order_;
        if (std::chrono::steady_clock::now() - last_flush_ >= k_touch_flush_interval) flush_locked();
    }
    return a;
}

bool UserLayer::insert_locked(const ArtifactInfo& i, std::span<const uint8_t> blob) {
    insert_.bind(1, i.key.hex())
        .bind(2, static_cast<int64_t>(i.kind))
        .bind(3, i.family)
        .bind(4, i.mode)
        .bind(5, i.m)
        .bind(6, i.n)
        .bind(7, i.k)
        .bind(8, i.experts)
        .bind(9, i.weight_format)
        .bind(10, i.act_dtype)
        .bind(11, i.target)
        .bind(12, i.config)
        .bind(13, i.kernel_name)
        .bind(14, i.compiler)
        .bind(15, i.compile_ms)
        .bind(16, static_cast<int64_t>(blob.size()))
        .bind(17, i.sha256)
        .bind(18, unix_now())
        .bind_blob(19, blob)
        .bind(20, xxh3_128_hex(blob));
    try {
        insert_.run();
    } catch (...) {
        insert_.reset();
        throw;
    }
    return db_.changes() > 0;
}

bool UserLayer::put(const ArtifactInfo& info, std::span<const uint8_t> blob) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writable_) return false;
    bool inserted = false;
    try {
        WriteTxn txn(db_);
        inserted = insert_locked(info, blob);
        txn.commit();
    } catch (const SqliteError& e) {
        on_write_error(e, fmt::format("storing key {}", info.key.hex()).c_str());
        return false;
    }
    if (inserted && total_locked() > opts_.max_bytes) {
        flush_locked();  // recent hits decide what is least recently used
        prune_locked(opts_.max_bytes);
    }
    return inserted;
}

void UserLayer::flush() {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
}

void UserLayer::flush_locked() {
    last_flush_ = std::chrono::steady_clock::now();
    if (pending_.empty()) return;
    if (!writable_) {
        pending_.clear();
        return;
    }
    std::vector<std::pair<ContentKey, Pending>> items(pending_.begin(), pending_.end());
    std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
    try {
        WriteTxn txn(db_);
        for (const auto& [key, p] : items) {
            touch_.bind(1, key.hex()).bind(2, p.hits).bind(3, p.last_used);
            touch_.run();
        }
        txn.commit();
        pending_.clear();
    } catch (const SqliteError& e) {
        touch_.reset();
        on_write_error(e, "recording cache hits");
        if (!writable_) pending_.clear();
    }
}

uint64_t UserLayer::total_locked() {
    if (!db_) return 0;
    return static_cast<uint64_t>(db_.scalar_i64("SELECT coalesce(sum(size), 0) FROM artifacts"));
}

uint64_t UserLayer::total_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_locked();
}

uint64_t UserLayer::file_bytes() const { return size_or_zero(path_) + size_or_zero(path_ + "-wal"); }

uint64_t UserLayer::prune(uint64_t max_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writable_) {
        std::error_code ec;
        if (!db_ && !fs::exists(path_, ec)) return 0;  // no cache: nothing to prune
        throw CacheError(fmt::format("cannot prune {}: {}", path_, disabled_reason_));
    }
    flush_locked();
    return prune_locked(max_bytes);
}

uint64_t UserLayer::prune_locked(uint64_t max_bytes) {
    uint64_t freed = 0, evicted = 0;
    try {
        WriteTxn txn(db_);
        uint64_t total = total_locked();
        if (total <= max_bytes) return 0;
        std::vector<std::pair<std::string, uint64_t>> victims;
        {
            Stmt s = db_.prepare("SELECT key, size FROM artifacts ORDER BY use_seq ASC");
            while (total - freed > max_bytes && s.step()) {
                victims.emplace_back(s.text(0), static_cast<uint64_t>(s.i64(1)));
                freed += victims.back().second;
            }
        }
        for (const auto& [key, size] : victims) {
            delete_.bind(1, key);
            delete_.run();
        }
        evicted = victims.size();
        txn.commit();
    } catch (const SqliteError& e) {
        delete_.reset();
        on_write_error(e, "pruning");
        return 0;
    }
    try {
        db_.exec("PRAGMA incremental_vacuum");
    } catch (const SqliteError& e) {
        log::debug("{}: incremental_vacuum: {}", path_, e.what());
    }
    log::info("{}: evicted {} least recently used artifacts ({} bytes) to stay under {} bytes", path_, evicted, freed,
              max_bytes);
    return freed;
}

void UserLayer::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    std::error_code ec;
    if (!db_ && !fs::exists(path_, ec)) return;  // no cache: nothing to clear
    if (!writable_) throw CacheError(fmt::format("cannot clear {}: {}", path_, disabled_reason_));
    if (!db_) throw CacheError(fmt::format("cannot clear {}: it cannot be opened", path_));
    pending_.clear();
    try {
        WriteTxn txn(db_);
        db_.exec("DELETE FROM artifacts");
        txn.commit();
        db_.exec("PRAGMA incremental_vacuum");
        db_.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    } catch (const SqliteError& e) {
        on_write_error(e, "clearing");
        throw CacheError(fmt::format("cannot clear {}: {}", path_, e.what()));
    }
}

std::vector<ArtifactInfo> UserLayer::list() {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
    std::vector<ArtifactInfo> out;
    if (!db_) return out;
    Stmt s = db_.prepare(fmt::format(
        "SELECT {} FROM artifacts ORDER BY family, mode, m, n, k, experts, target, key", k_info_columns));
    while (s.step()) {
        out.push_back(read_info(s, path_));
        out.back().layer = "user";
    }
    return out;
}

std::vector<ArtifactInfo> UserLayer::find_prefix(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
    std::vector<ArtifactInfo> out;
    if (!db_) return out;
    Stmt s = db_.prepare(fmt::format("SELECT {} FROM artifacts WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT 2",
                                     k_info_columns));
    s.bind(1, prefix).bind(2, prefix + "g");
    while (s.step()) {
        out.push_back(read_info(s, path_));
        out.back().layer = "user";
    }
    return out;
}

void UserLayer::verify(uint64_t& checked, std::vector<std::string>& problems) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!db_) return;
    try {
        Stmt ic = db_.prepare("PRAGMA integrity_check");
        while (ic.step())
            if (ic.text(0) != "ok") problems.push_back(fmt::format("{}: integrity_check: {}", path_, ic.text(0)));
        Stmt s = db_.prepare(fmt::format("SELECT {}, xxh3, blob FROM artifacts", k_info_columns));
        while (s.step()) {
            ++checked;
            ArtifactInfo a = read_info(s, path_);
            auto blob = s.blob(k_info_column_count + 1);
            if (blob.size() != a.bytes || sha256_hex(blob) != a.sha256 ||
                xxh3_128_hex(blob) != s.text(k_info_column_count))
                problems.push_back(fmt::format("{}: key {}: blob does not match its SHA-256 / XXH3", path_, a.key.hex()));
        }
    } catch (const Error& e) {
        problems.push_back(e.what());
    }
}

void UserLayer::export_to(const std::string& file, const SigningKey* key) {
    std::error_code ec;
    std::string abs = fs::absolute(file, ec).lexically_normal().string();
    std::string tmp = temp_sibling(abs);
    auto cleanup = [&] {
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(tmp + suffix, ec);
    };
    {
        std::lock_guard<std::mutex> lock(mu_);
        flush_locked();
        if (!db_) throw CacheError(fmt::format("no user cache at {} to export", path_));
        try {
            Stmt v = db_.prepare("VACUUM INTO ?1");
            v.bind(1, tmp);
            v.run();
        } catch (const SqliteError& e) {
            cleanup();
            throw CacheError(fmt::format("cannot export to {}: {}", file, e.what()));
        }
    }
    try {
        Db out(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, file);
        out.scalar_text("PRAGMA journal_mode = DELETE");
        size_t dropped = 0;
        {
            WriteTxn txn(out);
            out.exec("UPDATE artifacts SET hits = 0, last_used = 0, use_seq = 0");
            Stmt meta = out.prepare("INSERT OR REPLACE INTO meta(name, value) VALUES(?1, ?2)");
            meta.bind(1, "layer").bind(2, "prebuilt").run();
            meta.bind(1, "exported_at").bind(2, fmt::format("{}", unix_now())).run();
            create_manifest_tables(out);
            std::vector<ManifestEntry> entries;
            std::vector<std::string> bad;
            {
                Stmt s = out.prepare(fmt::format("SELECT {}, blob FROM artifacts", k_info_columns));
                while (s.step()) {
                    ArtifactInfo a = read_info(s, file);
                    auto blob = s.blob(k_info_column_count);
                    if (blob.size() != a.bytes || sha256_hex(blob) != a.sha256) {
                        bad.push_back(a.key.hex());
                        continue;
                    }
                    entries.push_back(ManifestEntry::from(a));
                }
            }
            Stmt del = out.prepare("DELETE FROM artifacts WHERE key = ?1");
            for (const auto& k : bad) {
                warnings_.warn(fmt::format("{}: key {}: blob does not match its SHA-256; left out of {}", path_, k, file));
                del.bind(1, k);
                del.run();
            }
            dropped = bad.size();
            write_manifest(out, entries);
            if (key != nullptr) {
                SignatureRecord sig;
                sig.key = key->public_key();
                sig.signature = key->sign(canonical_manifest(entries));
                sig.signed_at = unix_now();
                write_signature(out, sig);
            }
            txn.commit();
        }
        if (dropped > 0) out.exec("VACUUM");
        out.close();
        publish_file(tmp, abs);
    } catch (...) {
        cleanup();
        throw;
    }
}

uint64_t UserLayer::import_from(PrebuiltLayer& layer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writable_)
        throw CacheError(fmt::format("cannot import into {}: {}", path_,
                                     disabled_reason_.empty() ? "the user cache is read-only" : disabled_reason_));
    uint64_t inserted = 0, skipped = 0;
    try {
        WriteTxn txn(db_);
        for (const ArtifactInfo& info : layer.list()) {
            if (!layer.serves(info.kind)) {
                ++skipped;
                continue;
            }
            std::optional<Artifact> a = layer.read(info.key, info.kind);  // throws on a tampered entry
            if (!a) continue;
            if (insert_locked(a->info, a->blob)) ++inserted;
        }
        txn.commit();
    } catch (const SqliteError& e) {
        on_write_error(e, "importing");
        throw CacheError(fmt::format("cannot import {} into {}: {}", layer.path(), path_, e.what()));
    }
    if (skipped > 0)
        warnings_.warn(fmt::format("{}: skipped {} host object artifacts: the layer is {}, and host code is only taken "
                                   "from trusted signed layers",
                                   layer.path(), skipped, to_string(layer.trust())));
    if (total_locked() > opts_.max_bytes) {
        flush_locked();
        prune_locked(opts_.max_bytes);
    }
    return inserted;
}

}  // namespace kiln::cache
