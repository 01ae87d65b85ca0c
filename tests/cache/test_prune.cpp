// Size cap with LRU eviction: least recently used artifacts go first, hits from any process count.
#include <doctest/doctest.h>

#include "cache/store.hpp"
#include "cache_test_util.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;

static bool has(Store& s, const Artifact& a) { return s.find(a.info.key.hex()).has_value(); }

TEST_CASE("put prunes the least recently used artifacts to stay under the cap") {
    TempDir dir;
    StoreOptions o = options_in(dir);
    const size_t sz = 64 * 1024;
    o.max_bytes = 3 * sz + 1000;
    Store s(o);
    Artifact a = make_artifact(1, sz), b = make_artifact(2, sz), c = make_artifact(3, sz), d = make_artifact(4, sz);
    REQUIRE(s.put(a));
    REQUIRE(s.put(b));
    REQUIRE(s.put(c));
    REQUIRE(s.get(a.info.key, ArtifactKind::cubin).has_value());  // a is now more recent than b and c
    REQUIRE(s.put(d));
    CHECK(has(s, a));
    CHECK_FALSE(has(s, b));
    CHECK(has(s, c));
    CHECK(has(s, d));
    CHECK(s.stats().bytes == 3 * sz);
    CHECK(s.stats().bytes <= o.max_bytes);
}

TEST_CASE("prune(max) evicts in LRU order and reports the bytes freed") {
    TempDir dir;
    Store s(options_in(dir));
    std::vector<Artifact> arts;
    for (uint64_t i = 0; i < 10; ++i) {
        arts.push_back(make_artifact(i, 10000));
        REQUIRE(s.put(arts.back()));
    }
    // Use 7, 2, 5 (in that order): they are the most recent now.
    for (int i : {7, 2, 5}) REQUIRE(s.get(arts[static_cast<size_t>(i)].info.key, ArtifactKind::cubin).has_value());
    uint64_t freed = s.prune(35000);
    CHECK(freed == 70000);
    auto left = s.list();
    REQUIRE(left.size() == 3);
    for (int i : {7, 2, 5}) CHECK(has(s, arts[static_cast<size_t>(i)]));
    CHECK(s.prune(35000) == 0);  // already under the cap
    CHECK(s.verify().problems.empty());
    // Evict the two oldest of the three; 5 was used last.
    CHECK(s.prune(10000) == 20000);
    CHECK(has(s, arts[5]));
}

TEST_CASE("hits recorded by another process's store count for LRU order") {
    TempDir dir;
    std::vector<Artifact> arts;
    {
        Store s(options_in(dir));
        for (uint64_t i = 0; i < 3; ++i) {
            arts.push_back(make_artifact(i, 20000));
            REQUIRE(s.put(arts.back()));
        }
    }
    {
        Store s(options_in(dir));
        REQUIRE(s.get(arts[0].info.key, ArtifactKind::cubin).has_value());
    }
    Store s(options_in(dir));
    CHECK(s.prune(40000) == 20000);
    CHECK(has(s, arts[0]));
    CHECK_FALSE(has(s, arts[1]));
    CHECK(has(s, arts[2]));
}

TEST_CASE("the cap defaults to KILN_CACHE_MAX_SIZE") {
    TempDir dir;
    setenv("KILN_CACHE_MAX_SIZE", "100K", 1);
    StoreOptions o;
    o.cache_dir = dir / "user";
    Store s(o);
    unsetenv("KILN_CACHE_MAX_SIZE");
    CHECK(s.stats().max_bytes == 100 * 1024);
    for (uint64_t i = 0; i < 3; ++i) REQUIRE(s.put(make_artifact(i, 40000)));
    CHECK(s.list().size() == 2);
    CHECK(s.stats().bytes == 80000);
}

TEST_CASE("an artifact larger than the cap is not stored and evicts nothing") {
    TempDir dir;
    StoreOptions o = options_in(dir);
    o.max_bytes = 50000;
    Store s(o);
    Artifact small = make_artifact(1, 20000);
    REQUIRE(s.put(small));
    CHECK_FALSE(s.put(make_artifact(2, 60000)));
    CHECK(contains(s.warnings(), "larger than the cache cap"));
    CHECK(has(s, small));
    CHECK(s.caching_enabled());
}

TEST_CASE("pruning returns space to the file system") {
    TempDir dir;
    Store s(options_in(dir));
    for (uint64_t i = 0; i < 40; ++i) REQUIRE(s.put(make_artifact(i, 50000)));
    uint64_t before = s.stats().layers.back().file_bytes;
    CHECK(s.prune(100000) == 38 * 50000);
    s.clear();
    CHECK(s.list().empty());
    uint64_t after = s.stats().layers.back().file_bytes;
    CHECK(after < before / 4);
}
