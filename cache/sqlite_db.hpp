// A thin RAII layer over one SQLite connection and its prepared statements. Every failing call
// throws SqliteError carrying the extended result code and the database file name, so callers
// can tell a full disk or a damaged file from a programming error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_error.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::cache {

class SqliteError : public CacheError {
public:
    SqliteError(int code, const std::string& what) : CacheError(what), code_(code) {}
    int code() const { return code_; }           // extended result code
    int primary() const { return code_ & 0xff; }  // SQLITE_FULL, SQLITE_CORRUPT, ...
    // The storage cannot take writes: full disk, I/O error, read-only file or directory.
    bool is_storage_failure() const;
    // The file is not a usable database (garbage, truncated, wrong format).
    bool is_damage() const;
private:
    int code_;
};

class Stmt {
public:
    Stmt() = default;
    Stmt(sqlite3* db, std::string_view sql, const std::string& file);
    Stmt(Stmt&&) noexcept;
    Stmt& operator=(Stmt&&) noexcept;
    ~Stmt();

    // Binds are 1-based, as in SQLite.
    Stmt& bind(int i, int64_t v);
    Stmt& bind(int i, double v);
    Stmt& bind(int i, std::string_view text);
    Stmt& bind_blob(int i, std::span<const uint8_t> bytes);
    Stmt& bind_null(int i);

    bool step();   // true: a row is ready; false: done. Throws SqliteError.
    void run();    // step() to completion, then reset()
    void reset();  // also clears bindings

    // Columns are 0-based.
    int64_t i64(int col) const;
    double f64(int col) const;
    std::string text(int col) const;
    std::span<const uint8_t> blob(int col) const;  // valid until the next step()/reset()
    bool is_null(int col) const;

private:
    [[noreturn]] void fail(int rc) const;
    sqlite3* db_ = nullptr;
    sqlite3_stmt* s_ = nullptr;
    std::string file_;
};

class Db {
public:
    Db() = default;
    // `target` is a path or a `file:` URI (URIs are always enabled). `flags` are SQLITE_OPEN_*.
    // `file` is the plain path, used in error messages.
    Db(const std::string& target, int flags, std::string file);
    Db(Db&&) noexcept;
    Db& operator=(Db&&) noexcept;
    ~Db();

    explicit operator bool() const { return db_ != nullptr; }
    void close();
    sqlite3* raw() const { return db_; }
    const std::string& file() const { return file_; }

    void exec(std::string_view sql);  // one or more statements, no results
    Stmt prepare(std::string_view sql) const { return Stmt(db_, sql, file_); }
    int64_t scalar_i64(std::string_view sql) const;
    std::string scalar_text(std::string_view sql) const;
    int64_t changes() const;
    // Reads a whole BLOB cell straight into `out` (sqlite3_blob_read: no intermediate copy). Call
    // while a statement that selected the row is still active, so both see one snapshot.
    void read_blob(const char* table, const char* column, int64_t rowid, std::vector<uint8_t>& out) const;
    bool in_transaction() const;
    void rollback_quietly() noexcept;

private:
    sqlite3* db_ = nullptr;
    std::string file_;
};

// A `file:` URI for `path` with the given query (e.g. "mode=ro&immutable=1"), percent-escaped.
std::string sqlite_uri(const std::string& path, std::string_view query);

// Runs `BEGIN IMMEDIATE` on construction and ROLLBACK on destruction unless commit() was called.
class WriteTxn {
public:
    explicit WriteTxn(Db& db);
    ~WriteTxn();
    WriteTxn(const WriteTxn&) = delete;
    WriteTxn& operator=(const WriteTxn&) = delete;
    void commit();
private:
    Db& db_;
    bool done_ = false;
};

}  // namespace kiln::cache
