// A damaged user DB is moved aside and rebuilt; a full disk or an unusable directory disables
// caching with one warning and never throws.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include "cache/store.hpp"
#include "cache_test_util.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;

namespace {

void fill(const TempDir& dir, int n = 20, size_t size = 50000) {
    Store s(options_in(dir));
    for (int i = 0; i < n; ++i) REQUIRE(s.put(make_artifact(static_cast<uint64_t>(i), size)));
}

std::vector<fs::path> moved_aside(const TempDir& dir) {
    std::vector<fs::path> out;
    for (auto& e : fs::directory_iterator(dir.path / "user"))
        if (e.path().filename().string().rfind("kernels.db.corrupt-", 0) == 0) out.push_back(e.path());
    return out;
}

// Opens the damaged cache and checks that it was moved aside and rebuilt, and works.
void expect_recovered(const TempDir& dir, const std::string& damaged_bytes) {
    Store s(options_in(dir));
    CHECK(contains(s.warnings(), "was damaged"));
    CHECK(s.caching_enabled());
    auto aside = moved_aside(dir);
    REQUIRE(aside.size() == 1);
    CHECK(slurp(aside[0].string()) == damaged_bytes);  // kept as it was, for inspection
    CHECK(s.list().empty());
    Artifact a = make_artifact(999, 30000);
    CHECK(s.put(a));
    auto got = s.get(a.info.key, ArtifactKind::cubin);
    REQUIRE(got.has_value());
    CHECK(got->blob == a.blob);
    CHECK(s.verify().problems.empty());
}

std::string db_path(const TempDir& dir) { return dir / "user/kernels.db"; }

}  // namespace

TEST_CASE("a truncated DB is moved aside and rebuilt") {
    TempDir dir;
    fill(dir);
    REQUIRE_FALSE(fs::exists(db_path(dir) + "-wal"));  // checkpointed on close
    auto size = fs::file_size(db_path(dir));
    REQUIRE(size > 500000);
    fs::resize_file(db_path(dir), size / 2);
    expect_recovered(dir, slurp(db_path(dir)));
}

TEST_CASE("a DB truncated inside its header is moved aside and rebuilt") {
    TempDir dir;
    fill(dir, 2);
    fs::resize_file(db_path(dir), 60);
    expect_recovered(dir, slurp(db_path(dir)));
}

TEST_CASE("a garbage DB file is moved aside and rebuilt") {
    TempDir dir;
    fs::create_directories(dir.path / "user");
    auto junk = random_bytes(5, 65536);
    std::string bytes(junk.begin(), junk.end());
    spit(db_path(dir), bytes);
    expect_recovered(dir, bytes);
}

TEST_CASE("a DB with damaged pages past the header fails quick_check and is rebuilt") {
    TempDir dir;
    fill(dir, 8, 40000);
    std::string bytes = slurp(db_path(dir));
    // Overwrite the second page (the first b-tree page after the schema) with junk.
    auto junk = random_bytes(6, 16384);
    std::copy(junk.begin(), junk.end(), bytes.begin() + 16384);
    spit(db_path(dir), bytes);
    expect_recovered(dir, bytes);
}

TEST_CASE("another program's SQLite file at the cache path is moved aside") {
    TempDir dir;
    fs::create_directories(dir.path / "user");
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(db_path(dir).c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES('mine')", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(db);
    expect_recovered(dir, slurp(db_path(dir)));
}

TEST_CASE("a DB from a newer kiln is left alone and caching is disabled") {
    TempDir dir;
    fill(dir, 1, 1000);
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(db_path(dir).c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    std::string before = slurp(db_path(dir));
    Store s(options_in(dir));
    CHECK_FALSE(s.caching_enabled());
    CHECK(contains(s.warnings(), "newer kiln"));
    CHECK_FALSE(s.put(make_artifact(1)));
    CHECK(moved_aside(dir).empty());
    CHECK(slurp(db_path(dir)) == before);
}

TEST_CASE("a full disk (SQLITE_FULL via max_page_count) disables caching with one warning") {
    TempDir dir;
    StoreOptions o = options_in(dir);
    o.hard_limit_bytes = 1 << 20;  // 64 pages of 16 KiB
    Store s(o);
    REQUIRE(s.caching_enabled());
    std::vector<Artifact> stored;
    bool refused = false;
    for (uint64_t i = 0; i < 40 && !refused; ++i) {
        Artifact a = make_artifact(i, 64 * 1024);
        bool ok = false;
        CHECK_NOTHROW(ok = s.put(a));
        if (ok) stored.push_back(a);
        else refused = true;
    }
    REQUIRE(refused);
    CHECK(stored.size() >= 5);
    CHECK_FALSE(s.caching_enabled());
    // Later writes fail quietly: no exception, no new warning.
    size_t warnings = s.warnings().size();
    CHECK(warnings == 1);
    CHECK(contains(s.warnings(), "caching disabled"));
    CHECK(contains(s.warnings(), "full"));
    CHECK_FALSE(s.put(make_artifact(500, 1000)));
    CHECK(s.warnings().size() == warnings);
    CHECK_FALSE(s.lease(make_artifact(501).info.key).held());
    // What was stored before the disk filled up is still served, and the DB is intact.
    for (const auto& a : stored) {
        auto got = s.get(a.info.key, ArtifactKind::cubin);
        REQUIRE(got.has_value());
        CHECK(got->blob == a.blob);
    }
    CHECK(s.verify().problems.empty());
}

TEST_CASE("an unusable cache directory disables caching without throwing") {
    TempDir dir;
    spit(dir / "not-a-dir", "x");
    StoreOptions o;
    o.cache_dir = dir / "not-a-dir/kiln";
    std::optional<Store> s;
    CHECK_NOTHROW(s.emplace(o));
    CHECK_FALSE(s->caching_enabled());
    CHECK(s->warnings().size() == 1);
    CHECK(contains(s->warnings(), "caching disabled"));
    Artifact a = make_artifact(1);
    CHECK_FALSE(s->get(a.info.key, ArtifactKind::cubin).has_value());
    CHECK_FALSE(s->put(a));
    CHECK(s->list().empty());
    CHECK(s->stats().entries == 0);
    CHECK(s->warnings().size() == 1);
}

TEST_CASE("damage found at run time disables caching and marks the DB for a check at the next start") {
    TempDir dir;
    std::vector<Artifact> arts;
    {
        Store s(options_in(dir));
        for (uint64_t i = 0; i < 8; ++i) {
            arts.push_back(make_artifact(i, 40000));
            REQUIRE(s.put(arts.back()));
        }
    }
    {
        Store s(options_in(dir));
        REQUIRE(s.caching_enabled());
        // Another writer commits and checkpoints (so this process drops its page cache), then the
        // file is damaged under the running process (every page but the header page).
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(db_path(dir).c_str(), &db) == SQLITE_OK);
        REQUIRE(sqlite3_exec(db, "INSERT INTO meta VALUES('note', 'x'); PRAGMA wal_checkpoint(TRUNCATE);", nullptr,
                             nullptr, nullptr) == SQLITE_OK);
        sqlite3_close(db);
        std::string bytes = slurp(db_path(dir));
        auto junk = random_bytes(11, bytes.size() - 16384);
        std::copy(junk.begin(), junk.end(), bytes.begin() + 16384);
        spit(db_path(dir), bytes);
        CHECK_FALSE(s.get(arts[3].info.key, ArtifactKind::cubin).has_value());
        CHECK_FALSE(s.caching_enabled());
        CHECK(contains(s.warnings(), "is damaged"));
        CHECK(fs::exists(db_path(dir) + ".needs-check"));
        CHECK_FALSE(s.put(make_artifact(100)));
    }
    Store s(options_in(dir));
    CHECK(contains(s.warnings(), "was damaged"));
    CHECK(s.caching_enabled());
    CHECK_FALSE(fs::exists(db_path(dir) + ".needs-check"));
    CHECK(s.put(arts[3]));
}
