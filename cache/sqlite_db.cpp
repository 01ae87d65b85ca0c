#include "cache/sqlite_db.hpp"

#include <sqlite3.h>

#include <fmt/format.h>

namespace kiln::cache {

bool SqliteError::is_storage_failure() const {
    switch (primary()) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
        return true;
    default:
        return false;
    }
}

bool SqliteError::is_damage() const { return primary() == SQLITE_CORRUPT || primary() == SQLITE_NOTADB; }

static std::string describe(sqlite3* db, int rc, const std::string& file) {
    const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return fmt::format("{}: {}", file, msg != nullptr ? msg : sqlite3_errstr(rc));
}

// ---- Stmt ----

Stmt::Stmt(sqlite3* db, std::string_view sql, const std::string& file) : db_(db), file_(file) {
    int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &s_, nullptr);
    if (rc != SQLITE_OK) {
        int ext = sqlite3_extended_errcode(db);
        throw SqliteError(ext, describe(db, rc, file));
    }
}

Stmt::Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_), file_(std::move(o.file_)) {
    o.db_ = nullptr;
    o.s_ = nullptr;
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
    if (this != &o) {
        sqlite3_finalize(s_);
        db_ = o.db_;
        s_ = o.s_;
        file_ = std::move(o.file_);
        o.db_ = nullptr;
        o.s_ = nullptr;
    }
    return *this;
}

Stmt::~Stmt() { sqlite3_finalize(s_); }

void Stmt::fail(int rc) const {
    int ext = sqlite3_extended_errcode(db_);
    if ((ext & 0xff) != (rc & 0xff)) ext = rc;
    throw SqliteError(ext, describe(db_, rc, file_));
}

Stmt& Stmt::bind(int i, int64_t v) {
    if (int rc = sqlite3_bind_int64(s_, i, v); rc != SQLITE_OK) fail(rc);
    return *this;
}

Stmt& Stmt::bind(int i, double v) {
    if (int rc = sqlite3_bind_double(s_, i, v); rc != SQLITE_OK) fail(rc);
    return *this;
}

Stmt& Stmt::bind(int i, std::string_view text) {
    if (int rc = sqlite3_bind_text64(s_, i, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8); rc != SQLITE_OK)
        fail(rc);
    return *this;
}

Stmt& Stmt::bind_blob(int i, std::span<const uint8_t> bytes) {
    // A zero-length blob must still bind as a blob, not NULL.
    static const uint8_t empty = 0;
    const void* p = bytes.empty() ? &empty : bytes.data();
    if (int rc = sqlite3_bind_blob64(s_, i, p, bytes.size(), SQLITE_STATIC); rc != SQLITE_OK) fail(rc);
    return *this;
}

Stmt& Stmt::bind_null(int i) {
    if (int rc = sqlite3_bind_null(s_, i); rc != SQLITE_OK) fail(rc);
    return *this;
}

bool Stmt::step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    sqlite3_reset(s_);
    fail(rc);
}

void Stmt::run() {
    while (step()) {
    }
    reset();
}

void Stmt::reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
}

int64_t Stmt::i64(int col) const { return sqlite3_column_int64(s_, col); }
double Stmt::f64(int col) const { return sqlite3_column_double(s_, col); }

std::string Stmt::text(int col) const {
    const unsigned char* p = sqlite3_column_text(s_, col);
    int n = sqlite3_column_bytes(s_, col);
    return p != nullptr ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

std::span<const uint8_t> Stmt::blob(int col) const {
    const void* p = sqlite3_column_blob(s_, col);
    int n = sqlite3_column_bytes(s_, col);
    if (p == nullptr) return {};
    return {static_cast<const uint8_t*>(p), static_cast<size_t>(n)};
}

bool Stmt::is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

// ---- Db ----

Db::Db(const std::string& target, int flags, std::string file) : file_(std::move(file)) {
    int rc = sqlite3_open_v2(target.c_str(), &db_, flags | SQLITE_OPEN_URI, nullptr);
    if (rc != SQLITE_OK) {
        std::string what = describe(db_, rc, file_);
        int ext = db_ != nullptr ? sqlite3_extended_errcode(db_) : rc;
        sqlite3_close_v2(db_);
        db_ = nullptr;
        throw SqliteError(ext, what);
    }
    sqlite3_extended_result_codes(db_, 1);
}

Db::Db(Db&& o) noexcept : db_(o.db_), file_(std::move(o.file_)) { o.db_ = nullptr; }

Db& Db::operator=(Db&& o) noexcept {
    if (this != &o) {
        close();
        db_ = o.db_;
        file_ = std::move(o.file_);
        o.db_ = nullptr;
    }
    return *this;
}

Db::~Db() { close(); }

void Db::close() {
    if (db_ != nullptr) {
        // Statements are owned by callers and finalized before the Db goes; close_v2 defers
        // the real close until they are, so an ordering slip cannot leak the file handle.
        sqlite3_close_v2(db_);
        db_ = nullptr;
    }
}

void Db::exec(std::string_view sql) {
    std::string s(sql);
    char* err = nullptr;
    int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
        std::string what = fmt::format("{}: {}", file_, err != nullptr ? err : sqlite3_errstr(rc));
        sqlite3_free(err);
        int ext = sqlite3_extended_errcode(db_);
        if ((ext & 0xff) != (rc & 0xff)) ext = rc;
        throw SqliteError(ext, what);
    }
}

int64_t Db::scalar_i64(std::string_view sql) const {
    Stmt s = prepare(sql);
    return s.step() ? s.i64(0) : 0;
}

std::string Db::scalar_text(std::string_view sql) const {
    Stmt s = prepare(sql);
    return s.step() ? s.text(0) : std::string();
}

void Db::read_blob(const char* table, const char* column, int64_t rowid, std::vector<uint8_t>& out) const {
    sqlite3_blob* b = nullptr;
    int rc = sqlite3_blob_open(db_, "main", table, column, rowid, 0, &b);
    if (rc == SQLITE_OK) {
        out.resize(static_cast<size_t>(sqlite3_blob_bytes(b)));
        if (!out.empty()) rc = sqlite3_blob_read(b, out.data(), static_cast<int>(out.size()), 0);
    }
    if (rc != SQLITE_OK) {
        int ext = sqlite3_extended_errcode(db_);
        if ((ext & 0xff) != (rc & 0xff)) ext = rc;
        std::string what = describe(db_, rc, file_);
        sqlite3_blob_close(b);
        throw SqliteError(ext, what);
    }
    sqlite3_blob_close(b);
}

int64_t Db::changes() const { return sqlite3_changes64(db_); }

bool Db::in_transaction() const { return db_ != nullptr && sqlite3_get_autocommit(db_) == 0; }

void Db::rollback_quietly() noexcept {
    if (in_transaction()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

std::string sqlite_uri(const std::string& path, std::string_view query) {
    std::string out = "file:";
    for (unsigned char c : path) {
        if (c == '%' || c == '?' || c == '#' || c < 0x21 || c >= 0x7f)
            out += fmt::format("%{:02X}", c);
        else
            out += static_cast<char>(c);
    }
    if (!query.empty()) {
        out += '?';
        out += query;
    }
    return out;
}

WriteTxn::WriteTxn(Db& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

WriteTxn::~WriteTxn() {
    if (!done_) db_.rollback_quietly();
}

void WriteTxn::commit() {
    db_.exec("COMMIT");
    done_ = true;
}

}  // namespace kiln::cache
