#include <doctest/doctest.h>

#include <set>

#include "cache/content_key.hpp"
#include "runtime/error.hpp"

using kiln::cache::ContentKey;
using kiln::cache::KeyBuilder;

static ContentKey key_of(std::initializer_list<std::pair<const char*, const char*>> fields) {
    KeyBuilder b;
    for (auto& [l, v] : fields) b.field(l, v);
    return b.finish();
}

TEST_CASE("same fields give the same key") {
    CHECK(key_of({{"source", "abc"}, {"arch", "sm_90a"}}) == key_of({{"source", "abc"}, {"arch", "sm_90a"}}));
}

TEST_CASE("every label and value change changes the key") {
    std::set<ContentKey> keys;
    keys.insert(key_of({{"source", "abc"}, {"arch", "sm_90a"}}));
    keys.insert(key_of({{"source", "abd"}, {"arch", "sm_90a"}}));
    keys.insert(key_of({{"source", "abc"}, {"arch", "sm_90"}}));
    keys.insert(key_of({{"sourcf", "abc"}, {"arch", "sm_90a"}}));
    keys.insert(key_of({{"arch", "sm_90a"}, {"source", "abc"}}));
    // Moving bytes across the field boundary must not collide (length prefixes).
    keys.insert(key_of({{"source", "ab"}, {"arch", "csm_90a"}}));
    keys.insert(key_of({{"source", "abc"}}));
    CHECK(keys.size() == 7);
}

TEST_CASE("hex round trip and parse errors") {
    ContentKey k = key_of({{"x", "y"}});
    std::string h = k.hex();
    CHECK(h.size() == 32);
    CHECK(ContentKey::parse(h) == k);
    CHECK_THROWS_AS(ContentKey::parse("xyz"), kiln::InvalidArgument);
    CHECK_THROWS_AS(ContentKey::parse(std::string(32, 'g')), kiln::InvalidArgument);
}

TEST_CASE("integer fields are canonical") {
    KeyBuilder a, b;
    a.field("m", int64_t{128});
    b.field("m", "128");
    CHECK(a.finish() == b.finish());
}
