// Store round trip, persistence, prefix lookup, stats, thread safety, and user-layer row damage.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "cache/store.hpp"
#include "cache_test_util.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;

static void check_same(const Artifact& got, const Artifact& want) {
    CHECK(got.info.key == want.info.key);
    CHECK(got.info.kind == want.info.kind);
    CHECK(got.info.family == want.info.family);
    CHECK(got.info.mode == want.info.mode);
    CHECK(got.info.m == want.info.m);
    CHECK(got.info.n == want.info.n);
    CHECK(got.info.k == want.info.k);
    CHECK(got.info.experts == want.info.experts);
    CHECK(got.info.weight_format == want.info.weight_format);
    CHECK(got.info.act_dtype == want.info.act_dtype);
    CHECK(got.info.target == want.info.target);
    CHECK(got.info.config == want.info.config);
    CHECK(got.info.kernel_name == want.info.kernel_name);
    CHECK(got.info.compiler == want.info.compiler);
    CHECK(got.info.compile_ms == doctest::Approx(want.info.compile_ms));
    CHECK(got.info.bytes == want.blob.size());
    CHECK(got.info.sha256.size() == 64);
    CHECK(got.blob == want.blob);
}

TEST_CASE("round trip: put then get returns the same bytes and descriptor") {
    TempDir dir;
    Store store(options_in(dir));
    CHECK(store.caching_enabled());
    Artifact a = make_artifact(1, 70000);
    Artifact h = make_artifact(2, 5000, ArtifactKind::host_object);

    CHECK_FALSE(store.get(a.info.key, ArtifactKind::cubin).has_value());
    CHECK(store.put(a));
    CHECK(store.put(h));
    CHECK_FALSE(store.put(a));  // INSERT OR IGNORE: second put of a key inserts nothing

    auto got = store.get(a.info.key, ArtifactKind::cubin);
    REQUIRE(got.has_value());
    check_same(*got, a);
    CHECK(got->info.layer == "user");
    CHECK(got->info.created_at > 0);

    auto goth = store.get(h.info.key, ArtifactKind::host_object);
    REQUIRE(goth.has_value());
    check_same(*goth, h);
    // The key decides hits, and a key is never served as another kind.
    CHECK_FALSE(store.get(a.info.key, ArtifactKind::host_object).has_value());
    CHECK_FALSE(store.get(make_artifact(3).info.key, ArtifactKind::cubin).has_value());
    CHECK(fs::exists(store.user_db_path()));
    CHECK(store.warnings().empty());
}

TEST_CASE("artifacts persist across stores and hits are recorded") {
    TempDir dir;
    Artifact a = make_artifact(10, 20000);
    {
        Store s(options_in(dir));
        REQUIRE(s.put(a));
    }
    {
        Store s(options_in(dir));
        for (int i = 0; i < 3; ++i) REQUIRE(s.get(a.info.key, ArtifactKind::cubin).has_value());
    }  // destruction flushes the buffered hit counts
    Store s(options_in(dir));
    auto info = s.find(a.info.key.hex());
    REQUIRE(info.has_value());
    CHECK(info->hits == 3);
    CHECK(info->last_used >= info->created_at);
}

TEST_CASE("put validates its input") {
    TempDir dir;
    Store store(options_in(dir));
    Artifact a = make_artifact(4);
    a.info.sha256 = std::string(64, '0');
    CHECK_THROWS_AS(store.put(a), kiln::InvalidArgument);
    Artifact empty = make_artifact(5);
    empty.blob.clear();
    CHECK_THROWS_AS(store.put(empty), kiln::InvalidArgument);
    CHECK(store.list().empty());
}

TEST_CASE("find: full key, unique prefix, ambiguous prefix, junk") {
    TempDir dir;
    Store store(options_in(dir));
    std::vector<Artifact> arts;
    for (uint64_t i = 0; i < 40; ++i) {
        arts.push_back(make_artifact(100 + i, 512));
        REQUIRE(store.put(arts.back()));
    }
    const std::string full = arts[7].info.key.hex();
    auto f = store.find(full);
    REQUIRE(f.has_value());
    CHECK(f->key == arts[7].info.key);
    // The shortest prefix of key 7 that no other key shares.
    size_t len = 1;
    for (; len <= 32; ++len) {
        int matches = 0;
        for (auto& a : arts) matches += a.info.key.hex().compare(0, len, full, 0, len) == 0;
        if (matches == 1) break;
    }
    auto p = store.find(full.substr(0, len));
    REQUIRE(p.has_value());
    CHECK(p->key == arts[7].info.key);
    // Upper case works too.
    std::string upper = full.substr(0, len);
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    CHECK(store.find(upper)->key == arts[7].info.key);
    // With 40 keys, some one-digit prefix is shared by at least three of them (pigeonhole).
    std::map<char, int> first;
    for (auto& a : arts) first[a.info.key.hex()[0]]++;
    char shared = std::max_element(first.begin(), first.end(), [](auto& x, auto& y) { return x.second < y.second; })->first;
    CHECK_THROWS_AS(store.find(std::string(1, shared)), kiln::InvalidArgument);
    CHECK_THROWS_AS(store.find("xyz"), kiln::InvalidArgument);
    CHECK_THROWS_AS(store.find(""), kiln::InvalidArgument);
    // A well-formed prefix that matches nothing.
    std::string absent = full;
    for (char c : std::string("0123456789abcdef")) {
        absent = std::string(1, c) + full.substr(1);
        bool any = false;
        for (auto& a : arts) any |= a.info.key.hex() == absent;
        if (!any) break;
    }
    CHECK_FALSE(store.find(absent).has_value());
}

TEST_CASE("list and stats") {
    TempDir dir;
    Store store(options_in(dir));
    REQUIRE(store.put(make_artifact(1, 1000)));
    REQUIRE(store.put(make_artifact(2, 3000)));
    REQUIRE(store.put(make_artifact(3, 500, ArtifactKind::host_object)));
    auto items = store.list();
    CHECK(items.size() == 3);
    Store::Stats st = store.stats();
    CHECK(st.entries == 3);
    CHECK(st.bytes == 4500);
    CHECK(st.caching_enabled);
    REQUIRE(st.by_target.size() == 2);
    uint64_t cubin_bytes = 0;
    for (auto& [t, b] : st.by_target)
        if (t == "sm_90a") cubin_bytes = b;
    CHECK(cubin_bytes == 4000);
    REQUIRE(st.layers.size() == 1);
    CHECK(st.layers[0].name == "user");
    CHECK(st.layers[0].file_bytes > 4500);
    Store::VerifyReport r = store.verify();
    CHECK(r.checked == 3);
    CHECK(r.problems.empty());
}

TEST_CASE("concurrent threads share one store") {
    TempDir dir;
    Store store(options_in(dir));
    std::vector<Artifact> arts;
    for (uint64_t i = 0; i < 64; ++i) arts.push_back(make_artifact(1000 + i, 2048 + i * 13));
    std::atomic<int> inserted{0}, bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (size_t i = 0; i < arts.size(); ++i) {
                const Artifact& a = arts[(i + static_cast<size_t>(t) * 16) % arts.size()];
                if (store.put(a)) inserted++;
                auto got = store.get(a.info.key, ArtifactKind::cubin);
                if (!got || got->blob != a.blob) bad++;
            }
        });
    for (auto& th : threads) th.join();
    CHECK(inserted == 64);
    CHECK(bad == 0);
    CHECK(store.list().size() == 64);
}

TEST_CASE("a damaged user-layer row is dropped, never returned") {
    TempDir dir;
    Artifact a = make_artifact(7, 9000);
    {
        Store s(options_in(dir));
        REQUIRE(s.put(a));
    }
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open((dir / "user/kernels.db").c_str(), &db) == SQLITE_OK);
        std::string sql = "UPDATE artifacts SET blob = randomblob(9000) WHERE key = '" + a.info.key.hex() + "'";
        REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
        sqlite3_close(db);
    }
    Store s(options_in(dir));
    CHECK(s.verify().problems.size() == 1);
    CHECK_FALSE(s.get(a.info.key, ArtifactKind::cubin).has_value());
    CHECK(contains(s.warnings(), a.info.key.hex()));
    CHECK(s.list().empty());  // the row is gone; the next compile replaces it
    CHECK(s.put(a));
    REQUIRE(s.get(a.info.key, ArtifactKind::cubin).has_value());
}

TEST_CASE("read-only store never writes") {
    TempDir dir;
    Artifact a = make_artifact(8);
    {
        Store s(options_in(dir));
        REQUIRE(s.put(a));
    }
    StoreOptions o = options_in(dir);
    o.read_only = true;
    Store ro(o);
    CHECK_FALSE(ro.caching_enabled());
    CHECK(ro.get(a.info.key, ArtifactKind::cubin).has_value());
    CHECK_FALSE(ro.put(make_artifact(9)));
    CHECK_FALSE(ro.lease(a.info.key).held());
    CHECK(ro.list().size() == 1);
}

TEST_CASE("default cache dir follows KILN_CACHE_DIR, then XDG, then HOME") {
    const char* saved[] = {std::getenv("KILN_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
    std::string keep[3];
    for (int i = 0; i < 3; ++i) keep[i] = saved[i] ? saved[i] : "";
    setenv("KILN_CACHE_DIR", "/srv/kiln-cache", 1);
    CHECK(default_cache_dir() == "/srv/kiln-cache");
    unsetenv("KILN_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/home/u/.xdg", 1);
    CHECK(default_cache_dir() == "/home/u/.xdg/kiln");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    CHECK(default_cache_dir() == "/home/u/.cache/kiln");
    const char* names[] = {"KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    for (int i = 0; i < 3; ++i) {
        if (saved[i]) setenv(names[i], keep[i].c_str(), 1);
        else unsetenv(names[i]);
    }
}

TEST_CASE("options from the environment split path lists on ':' and ','") {
    CHECK(split_path_list("a.kcache:b.kcache,c.kcache") == std::vector<std::string>{"a.kcache", "b.kcache", "c.kcache"});
    CHECK(split_path_list("::a::") == std::vector<std::string>{"a"});
    setenv("KILN_KERNEL_CACHE", "x.kcache:y.kcache", 1);
    setenv("KILN_TRUSTED_KEYS", "k1.pub,k2.pub", 1);
    setenv("KILN_CACHE_MAX_SIZE", "3G", 1);
    StoreOptions o = store_options_from_env();
    CHECK(o.prebuilt == std::vector<std::string>{"x.kcache", "y.kcache"});
    CHECK(o.trusted_keys == std::vector<std::string>{"k1.pub", "k2.pub"});
    CHECK(o.max_bytes == 3ull << 30);
    CHECK_FALSE(o.require_signed);
    setenv("KILN_REQUIRE_SIGNED", "yes", 1);
    CHECK(store_options_from_env().require_signed);
    unsetenv("KILN_REQUIRE_SIGNED");
    setenv("KILN_CACHE_MAX_SIZE", "lots", 1);
    CHECK_THROWS_AS(store_options_from_env(), kiln::InvalidArgument);
    unsetenv("KILN_KERNEL_CACHE");
    unsetenv("KILN_TRUSTED_KEYS");
    unsetenv("KILN_CACHE_MAX_SIZE");
    CHECK(default_max_bytes() == 10ull << 30);
}
