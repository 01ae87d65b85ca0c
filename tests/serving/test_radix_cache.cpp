#include <doctest/doctest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"
#include "serving/memory/radix_cache.hpp"

using namespace kiln::serving::memory;

namespace {

// tokens [0, n) of the sequence named `name`; sequences with different names share no first token.
std::vector<Token> seq(Token name, size_t n) {
    std::vector<Token> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = name * 1000000 + static_cast<Token>(i);
    return t;
}

// `base` up to `at`, then tokens of `name`.
std::vector<Token> fork(const std::vector<Token>& base, size_t at, Token name, size_t n) {
    std::vector<Token> t(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(at));
    for (size_t i = at; i < n; ++i) t.push_back(name * 1000000 + static_cast<Token>(i));
    return t;
}

struct Cache {
    KvPagePool kv;
    StateSlotPool state;
    RadixCache tree;
    explicit Cache(size_t page_size, RadixCacheConfig config = {}, size_t pages = 4096, size_t slots = 64)
        : kv(std::make_unique<FixedBlockAllocator>(pages), page_size),
          state(std::make_unique<FixedBlockAllocator>(slots)),
          tree(kv, state, config) {}

    std::vector<PageId> fresh_pages(size_t tokens) {
        std::vector<PageId> p;
        REQUIRE(kv.allocate(kv.pages_for(tokens), p));
        return p;
    }
    SlotId fresh_slot() {
        std::vector<SlotId> s;
        REQUIRE(state.allocate(1, s));
        return s[0];
    }
    std::vector<Checkpoint> fresh_checkpoints(const std::vector<size_t>& at) {
        std::vector<Checkpoint> c;
        for (size_t pos : at) c.push_back({pos, fresh_slot()});
        return c;
    }
    // What a request that computed all of `tokens` itself hands to the tree when it finishes.
    InsertResult put(const std::vector<Token>& tokens, const std::vector<size_t>& at) {
        std::vector<PageId> pages = fresh_pages(tokens.size());
        std::vector<Checkpoint> c = fresh_checkpoints(at);
        InsertResult r = tree.insert(tokens, pages, c);
        check();
        return r;
    }
    void check() {
        tree.check_invariants(OutsideHolds{});
        kv.check_invariants();
        state.check_invariants();
    }
};

}  // namespace

TEST_CASE("radix cache: the checkpoint grid is lcm(64, page size)") {
    for (auto [ps, grid] : {std::pair<size_t, size_t>{1, 64}, {16, 64}, {48, 192}, {128, 128}}) {
        Cache c(ps);
        CHECK(c.tree.grid() == grid);
    }
    Cache c(1);
    CHECK(c.tree.last_grid_before(130) == 128);
    CHECK(c.tree.last_grid_before(128) == 64);
    CHECK(c.tree.last_grid_before(65) == 64);
    CHECK(c.tree.last_grid_before(64) == 0);
    CHECK(c.tree.last_grid_before(0) == 0);
    RadixCacheConfig other;
    other.chunk = 32;
    Cache c32(1, other);
    CHECK(c32.tree.grid() == 32);
}

TEST_CASE("radix cache: an empty tree matches nothing") {
    Cache c(1);
    auto m = c.tree.match_prefix(seq(1, 100));
    CHECK(m.kv_len == 0);
    CHECK(m.pages.empty());
    CHECK(m.state_len == 0);
    CHECK(m.state_slot == no_slot);
    CHECK(m.branch_len == 0);
    CHECK(m.state_node == c.tree.root());
    CHECK(c.tree.stats().queries == 1);
    c.check();
}

TEST_CASE("radix cache: match returns the KV, the deepest checkpoint and the branch point") {
    Cache c(1);
    const auto a = seq(1, 256);
    std::vector<PageId> pages = c.fresh_pages(256);
    const std::vector<PageId> inserted = pages;
    auto ck = c.fresh_checkpoints({128, 256});
    auto r = c.tree.insert(a, pages, ck);
    c.check();
    CHECK(r.length == 256);
    CHECK(r.new_tokens == 256);
    CHECK(r.checkpoints_added == 2);
    CHECK(c.tree.nodes() == 2);
    CHECK(c.tree.cached_pages() == 256);

    auto longer = a;
    longer.push_back(7);
    auto m = c.tree.match_prefix(longer);
    CHECK(m.kv_len == 256);
    CHECK(m.pages == inserted);
    CHECK(m.state_len == 256);
    CHECK(m.state_slot == ck[1].slot);
    CHECK(m.branch_len == 0);

    // A shorter prompt on the same path: KV to 199 (one token must be computed), state at 128.
    m = c.tree.match_prefix(std::vector<Token>(a.begin(), a.begin() + 200));
    CHECK(m.kv_len == 199);
    CHECK(m.pages.size() == 199);
    CHECK(m.state_len == 128);
    CHECK(m.state_slot == ck[0].slot);
    CHECK(m.branch_len == 192);
    CHECK(c.tree.stats().hit_tokens == 256 + 128);
}

TEST_CASE("radix cache: an exact repeat of a prompt hits at the last grid boundary before its end") {
    for (size_t ps : {1, 16}) {
        CAPTURE(ps);
        Cache c(ps);
        const auto p = seq(1, 130);
        // The first run emits a checkpoint at last_grid_before(130) = 128; the KV of [128, 130) is not kept.
        auto r = c.put(p, {c.tree.last_grid_before(p.size())});
        CHECK(r.length == 128);
        auto m = c.tree.match_prefix(p);
        CHECK(m.state_len == 128);
        CHECK(m.kv_len == 128);

        // A prompt of exactly 128 tokens: a checkpoint at 128 alone cannot serve its repeat.
        const auto q = seq(2, 128);
        c.put(q, {128});
        m = c.tree.match_prefix(q);
        CHECK(m.state_len == 0);
        CHECK(m.kv_len == 127 / ps * ps);
        CHECK(m.branch_len == 64);
        // With the checkpoint at last_grid_before(128) = 64 as well, the repeat hits.
        const auto q2 = seq(3, 128);
        c.put(q2, {c.tree.last_grid_before(128), 128});
        m = c.tree.match_prefix(q2);
        CHECK(m.state_len == 64);
        CHECK(m.kv_len < 128);
    }
}

TEST_CASE("radix cache: a branch point placed at the divergence serves the next branch") {
    Cache c(1);
    const auto a = seq(1, 300);
    c.put(a, {256});
    CHECK(c.tree.nodes() == 1);

    // B shares 200 tokens with A: the KV matches past any checkpoint.
    const auto b = fork(a, 200, 2, 300);
    auto m = c.tree.match_prefix(b);
    CHECK(m.kv_len == 200);
    CHECK(m.state_len == 0);
    CHECK(m.branch_len == 192);

    // B is computed from the zero state and emits a checkpoint at the branch point.
    auto r = c.put(b, {m.branch_len, 256});
    CHECK(r.cached_tokens == 200);
    CHECK(r.duplicate_pages == 200);
    CHECK(r.pages_freed == 200 + 44);  // duplicates, and the KV past the last checkpoint
    CHECK(r.checkpoints_added == 2);
    // root - [0,192) ckpt - [192,200) tombstone - {A [200,256) ckpt, B [200,256) ckpt}
    CHECK(c.tree.nodes() == 4);
    CHECK(c.tree.tombstones() == 1);
    CHECK(c.tree.checkpoints() == 3);

    const auto d = fork(a, 200, 3, 260);
    m = c.tree.match_prefix(d);
    CHECK(m.state_len == 192);
    CHECK(m.kv_len == 200);
    CHECK(m.branch_len == 0);
}

TEST_CASE("radix cache: edges are whole pages; a divergence inside a page shares only the pages before it") {
    Cache c(16);
    const auto a = seq(1, 128);
    c.put(a, {64, 128});
    const auto b = fork(a, 40, 2, 128);  // diverges inside page [32, 48)
    auto m = c.tree.match_prefix(b);
    CHECK(m.kv_len == 32);
    CHECK(m.pages.size() == 2);
    CHECK(m.branch_len == 0);
    auto r = c.put(b, {64, 128});
    CHECK(r.cached_tokens == 32);
    CHECK(r.duplicate_pages == 2);
    CHECK(c.tree.tombstones() == 1);  // [0, 32), forking into A and B
    m = c.tree.match_prefix(b);
    CHECK(m.state_len == 64);
}

TEST_CASE("radix cache: checkpoints are evicted independently of their KV, leaving tombstones") {
    Cache c(1);
    const auto a = seq(1, 192);
    c.put(a, {64, 128, 192});
    CHECK(c.tree.nodes() == 3);
    CHECK(c.tree.evictable_checkpoints() == 3);

    // The least recently used checkpoint is the shallowest (the insert refreshed its tail last).
    auto e = c.tree.evict_checkpoints(1);
    c.check();
    CHECK(e.slots_freed == 1);
    CHECK(e.pages_freed == 0);
    CHECK(c.tree.cached_pages() == 192);
    CHECK(c.tree.checkpoints() == 2);
    CHECK(c.tree.nodes() == 2);  // the tombstone had one child and merged into it
    CHECK(c.tree.match_prefix(std::vector<Token>(a.begin(), a.begin() + 100), false).state_len == 0);
    auto m = c.tree.match_prefix(std::vector<Token>(a.begin(), a.begin() + 150), false);
    CHECK(m.state_len == 128);
    CHECK(m.kv_len == 149);

    // A fork's checkpoint leaves a tombstone with two children.
    const auto b = fork(a, 128, 2, 192);
    c.put(b, {192});
    CHECK(c.tree.tombstones() == 0);
    const uint64_t before = c.tree.stats().evicted_checkpoints;
    e = c.tree.evict_checkpoints(1);  // [0, 128) is the oldest checkpoint
    c.check();
    CHECK(e.slots_freed == 1);
    CHECK(c.tree.stats().evicted_checkpoints == before + 1);
    CHECK(c.tree.tombstones() == 1);
    CHECK(c.tree.cached_pages() == 256);
    m = c.tree.match_prefix(fork(a, 128, 3, 200), false);
    CHECK(m.kv_len == 128);
    CHECK(m.state_len == 0);
    CHECK(m.branch_len == 128);

    // Evicting one leaf under the tombstone merges it into the other; evicting that frees everything.
    e = c.tree.evict_kv(1);
    c.check();
    CHECK(e.pages_freed == 64);
    CHECK(e.slots_freed == 1);
    CHECK(c.tree.tombstones() == 0);
    CHECK(c.tree.nodes() == 1);
    e = c.tree.evict_kv(1);
    c.check();
    CHECK(e.pages_freed == 192);
    CHECK(c.tree.nodes() == 0);
    CHECK(c.kv.used() == 0);
    CHECK(c.state.used() == 0);
}

TEST_CASE("radix cache: a leaf's checkpoint goes with the leaf") {
    Cache c(1);
    c.put(seq(1, 64), {64});
    auto e = c.tree.evict_checkpoints(1);
    CHECK(e.slots_freed == 1);
    CHECK(e.pages_freed == 64);
    CHECK(e.nodes_removed == 1);
    CHECK(c.tree.nodes() == 0);
    c.check();
}

TEST_CASE("radix cache: KV eviction takes the least recently used unlocked leaf") {
    Cache c(1);
    const auto a = seq(1, 64), b = seq(2, 64), d = seq(3, 64);
    c.put(a, {64});
    c.put(b, {64});
    c.put(d, {64});
    auto probe = [&](const std::vector<Token>& t) {
        auto x = t;
        x.push_back(0);
        return c.tree.match_prefix(x, false).state_len;
    };
    c.tree.match_prefix(fork(a, 64, 9, 70));  // refreshes A
    c.tree.evict_kv(1);
    CHECK(probe(b) == 0);
    CHECK(probe(a) == 64);
    CHECK(probe(d) == 64);
    c.tree.evict_kv(1);
    CHECK(probe(d) == 0);
    CHECK(probe(a) == 64);
    c.check();
}

TEST_CASE("radix cache: a hit refreshes only the node whose checkpoint it consumed") {
    Cache c(1);
    const auto p = seq(1, 128);
    c.put(p, {64, 128});  // X = [0, 64), Y = [64, 128)
    const auto z = seq(2, 64);
    c.put(z, {64});
    c.tree.match_prefix(fork(p, 128, 5, 150));  // consumes Y; X is not refreshed

    // X is now the least recently used checkpoint, older than Z.
    auto e = c.tree.evict_checkpoints(1);
    CHECK(e.slots_freed == 1);
    CHECK(e.pages_freed == 0);
    CHECK(c.tree.match_prefix(fork(p, 100, 6, 120), false).state_len == 0);
    CHECK(c.tree.match_prefix(fork(z, 64, 7, 70), false).state_len == 64);
    CHECK(c.tree.match_prefix(fork(p, 128, 8, 140), false).state_len == 128);
    c.check();
}

TEST_CASE("radix cache: the per-path cap prunes the shallowest checkpoints, keeping tail, forks and locked") {
    SUBCASE("a plain chain") {
        RadixCacheConfig cfg;
        cfg.max_checkpoints_per_path = 2;
        Cache c(1, cfg);
        auto r = c.put(seq(1, 256), {64, 128, 192, 256});
        CHECK(r.checkpoints_pruned == 2);
        CHECK(c.tree.checkpoints() == 2);
        CHECK(c.tree.nodes() == 2);
        CHECK(c.tree.cached_pages() == 256);
        CHECK(c.state.used() == 2);
        CHECK(c.tree.stats().pruned_checkpoints == 2);
        CHECK(c.tree.match_prefix(seq(1, 200), false).state_len == 192);
        CHECK(c.tree.match_prefix(seq(1, 150), false).state_len == 0);
    }
    SUBCASE("a fork is kept") {
        RadixCacheConfig cfg;
        cfg.max_checkpoints_per_path = 2;
        Cache c(1, cfg);
        const auto a = seq(1, 256);
        c.put(std::vector<Token>(a.begin(), a.begin() + 128), {64, 128});
        c.put(fork(a, 64, 2, 128), {128});  // [0, 64) now forks
        auto r = c.put(a, {192, 256});      // path 64 (fork), 128, 192, 256: 128 and 192 go
        CHECK(r.checkpoints_pruned == 2);
        CHECK(c.tree.match_prefix(fork(a, 70, 3, 80), false).state_len == 64);
        CHECK(c.tree.match_prefix(fork(a, 130, 3, 140), false).state_len == 64);
        CHECK(c.tree.match_prefix(fork(a, 200, 3, 210), false).state_len == 64);
        CHECK(c.tree.match_prefix(fork(a, 256, 3, 260), false).state_len == 256);
    }
    SUBCASE("a locked node is kept") {
        RadixCacheConfig cfg;
        cfg.max_checkpoints_per_path = 2;
        Cache c(1, cfg);
        const auto a = seq(1, 256);
        auto first = c.put(std::vector<Token>(a.begin(), a.begin() + 64), {64});
        c.tree.lock(first.tail);
        auto r = c.put(a, {128, 192, 256});
        CHECK(r.checkpoints_pruned == 2);  // 128 and 192; 64 is locked
        CHECK(c.tree.match_prefix(fork(a, 100, 3, 110), false).state_len == 64);
        CHECK(c.tree.match_prefix(fork(a, 200, 3, 210), false).state_len == 64);
        c.tree.unlock(first.tail);
        c.check();
    }
}

TEST_CASE("radix cache: inserting a cached prefix again frees the caller's duplicate pages and slots") {
    Cache c(4);
    const auto a = seq(1, 128);
    std::vector<PageId> p1 = c.fresh_pages(128);
    const std::vector<PageId> tree_pages = p1;
    auto ck1 = c.fresh_checkpoints({64, 128});
    c.tree.insert(a, p1, ck1);
    c.check();

    SUBCASE("consume: the duplicates are released") {
        std::vector<PageId> p2 = c.fresh_pages(130);  // 33 pages: the last one is past the deepest checkpoint
        const std::vector<PageId> mine = p2;
        auto ck2 = c.fresh_checkpoints({64, 128});
        auto with_tail = a;
        with_tail.push_back(1);
        with_tail.push_back(2);
        auto r = c.tree.insert(with_tail, p2, ck2);
        CHECK(r.cached_tokens == 128);
        CHECK(r.new_tokens == 0);
        CHECK(r.duplicate_pages == 32);
        CHECK(r.pages_freed == 33);
        CHECK(r.checkpoints_duplicate == 2);
        for (PageId p : mine) CHECK(c.kv.refcount(p) == 0);
        for (PageId p : tree_pages) CHECK(c.kv.refcount(p) == 1);
        CHECK_FALSE(c.state.is_allocated(ck2[0].slot));
        CHECK(c.state.is_allocated(ck1[0].slot));
        c.check();
    }
    SUBCASE("keep: the caller's pages are swapped for the cached ones") {
        std::vector<PageId> p3 = c.fresh_pages(128);
        auto ck3 = c.fresh_checkpoints({64});
        auto r = c.tree.insert(a, p3, ck3, PageRefs::keep);
        CHECK(r.length == 64);
        CHECK(r.duplicate_pages == 16);
        CHECK(r.pages_freed == 16);
        CHECK(std::equal(p3.begin(), p3.begin() + 16, tree_pages.begin()));
        CHECK_FALSE(std::equal(p3.begin() + 16, p3.end(), tree_pages.begin() + 16));  // past length: untouched
        OutsideHolds held;
        held.pages = p3;
        c.tree.check_invariants(held);
        CHECK(c.kv.refcount(tree_pages[0]) == 2);
        c.kv.release(p3);
        c.check();
    }
}

TEST_CASE("radix cache: a request's pages (matched and its own) go back to the tree on insert") {
    Cache c(1);
    const auto a = seq(1, 200);
    c.put(std::vector<Token>(a.begin(), a.begin() + 128), {64, 128});
    // Admission: resume at the checkpoint, hold its pages, compute the rest.
    auto m = c.tree.match_prefix(a);
    REQUIRE(m.state_len == 128);
    c.tree.lock(m.state_node);
    c.tree.lock_state(m.state_node);
    std::vector<PageId> pages(m.pages.begin(), m.pages.begin() + static_cast<std::ptrdiff_t>(m.state_len));
    c.kv.retain(pages);
    SlotId working = c.fresh_slot();
    c.tree.unlock_state(m.state_node);  // the copy-on-write copy is enqueued
    REQUIRE(c.kv.allocate(200 - 128, pages));
    OutsideHolds held;
    held.pages = pages;
    held.slots = {working};
    c.tree.check_invariants(held);
    // Finish: snapshot at 192 donated, the working slot freed, the lock released.
    SlotId snapshot = c.fresh_slot();
    std::vector<Checkpoint> ck = {{192, snapshot}};
    auto r = c.tree.insert(a, pages, ck);
    c.tree.unlock(m.state_node);
    c.state.free(working);
    CHECK(r.cached_tokens == 128);
    CHECK(r.new_tokens == 64);
    CHECK(r.duplicate_pages == 0);
    CHECK(r.pages_freed == 8);  // [192, 200)
    CHECK(c.kv.used() == 192);
    CHECK(c.tree.match_prefix(a).state_len == 192);
    c.check();
}

TEST_CASE("radix cache: locks keep the path's KV and the node's checkpoint from eviction") {
    Cache c(1);
    const auto a = seq(1, 192);
    auto r = c.put(a, {64, 128, 192});
    const auto b = seq(2, 64);
    c.put(b, {64});
    CHECK(c.tree.evictable_pages() == 256);

    c.tree.lock(r.tail);
    CHECK(c.tree.evictable_pages() == 64);
    auto e = c.tree.evict_kv(1000);
    CHECK(e.pages_freed == 64);  // only B
    CHECK(c.tree.cached_pages() == 192);
    e = c.tree.evict_checkpoints(1000);  // interior checkpoints may go, the locked one stays
    CHECK(e.slots_freed == 2);
    CHECK(e.pages_freed == 0);
    CHECK(c.tree.checkpoints() == 1);
    CHECK(c.tree.match_prefix(fork(a, 192, 3, 200), false).state_len == 192);
    c.check();
    c.tree.unlock(r.tail);
    CHECK(c.tree.evictable_pages() == 192);
    CHECK(c.tree.evict_kv(1).pages_freed == 192);
    CHECK(c.kv.used() == 0);
    c.check();
}

TEST_CASE("radix cache: a state lock keeps one checkpoint, and its node stays while locked") {
    Cache c(1);
    const auto a = seq(1, 128);
    c.put(a, {64, 128});
    auto m = c.tree.match_prefix(fork(a, 100, 2, 110));
    REQUIRE(m.state_len == 64);
    c.tree.lock_state(m.state_node);
    CHECK(c.tree.evict_checkpoints(1000).slots_freed == 1);  // the leaf at 128 (with its KV)
    CHECK(c.tree.checkpoints() == 1);
    CHECK(c.tree.evict_kv(1000).pages_freed == 0);  // [0, 64) is now a leaf, but locked
    CHECK(c.tree.evictable_pages() == 0);
    c.check();
    c.tree.unlock_state(m.state_node);
    CHECK(c.tree.evictable_checkpoints() == 1);
    CHECK(c.tree.evict_kv(1000).pages_freed == 64);
    c.check();
}

TEST_CASE("radix cache: lock misuse and stale references throw") {
    Cache c(1);
    const auto a = seq(1, 128);
    auto r = c.put(a, {128});
    c.put(fork(a, 64, 2, 128), {128});  // [0, 64) is a tombstone fork
    auto m = c.tree.match_prefix(fork(a, 64, 3, 100));
    REQUIRE(m.kv_len == 64);
    CHECK_THROWS_AS(c.tree.lock(m.kv_node), kiln::InvalidArgument);  // a tombstone
    CHECK_THROWS_AS(c.tree.lock_state(m.kv_node), kiln::InvalidArgument);
    CHECK_THROWS_AS(c.tree.unlock(r.tail), kiln::InvalidArgument);
    CHECK_THROWS_AS(c.tree.unlock_state(r.tail), kiln::InvalidArgument);
    c.tree.lock(c.tree.root());
    c.tree.unlock(c.tree.root());
    c.tree.evict_kv(1000);
    CHECK_THROWS_AS(c.tree.lock(r.tail), kiln::InvalidArgument);  // removed: stale
    c.check();
}

TEST_CASE("radix cache: bad inserts throw and change nothing") {
    Cache c(4);
    const auto a = seq(1, 128);
    c.put(a, {64});
    const size_t pages_used = c.kv.used(), slots_used = c.state.used(), cached = c.tree.cached_pages();
    std::vector<PageId> p = c.fresh_pages(128);
    const SlotId s = c.fresh_slot();
    auto expect_rejected = [&](std::vector<PageId> pages, std::vector<Checkpoint> ck, const char* what) {
        CAPTURE(what);
        CHECK_THROWS_AS(c.tree.insert(a, pages, ck), kiln::InvalidArgument);
        CHECK(c.tree.cached_pages() == cached);
        CHECK(c.kv.used() == pages_used + 32);
        CHECK(c.state.used() == slots_used + 1);
        for (PageId x : p) CHECK(c.kv.refcount(x) == 1);
    };
    expect_rejected(std::vector<PageId>(p.begin(), p.end() - 1), {{128, s}}, "too few pages");
    expect_rejected(p, {{96, s}}, "off the grid");
    expect_rejected(p, {{192, s}}, "past the tokens");
    expect_rejected(p, {{128, s}, {64, s}}, "not increasing");
    expect_rejected(p, {{64, s}, {128, s}}, "a slot twice");
    expect_rejected(p, {{128, 63}}, "a free slot");
    auto dup = p;
    dup[3] = dup[2];
    expect_rejected(dup, {{128, s}}, "a page twice");
    auto freed = p;
    freed[5] = 4000;
    expect_rejected(freed, {{128, s}}, "a free page");
    auto held = c.tree.match_prefix(a);
    expect_rejected(p, {{128, held.state_slot}}, "a slot the tree holds");
    c.kv.release(p);
    c.state.free(s);
    c.check();
}

TEST_CASE("radix cache: the invariant checker sees references and slots taken behind its back") {
    Cache c(1);
    const auto a = seq(1, 64);
    c.put(a, {64});
    auto m = c.tree.match_prefix(fork(a, 64, 2, 70));
    REQUIRE(m.state_len == 64);

    c.kv.retain(m.pages[3]);  // a caller holds a page it does not declare
    CHECK_THROWS_AS(c.tree.check_invariants(OutsideHolds{}), kiln::InvariantViolation);
    OutsideHolds held;
    held.pages = {m.pages[3]};
    CHECK_NOTHROW(c.tree.check_invariants(held));
    c.kv.release(m.pages[3]);

    c.kv.release(m.pages[5]);  // a caller releases a reference the tree owns
    CHECK_THROWS_AS(c.tree.check_invariants(), kiln::InvariantViolation);
    c.kv.allocate(1, m.pages);  // the freed id comes back with one reference: the tree's again
    CHECK_NOTHROW(c.tree.check_invariants());

    c.state.free(m.state_slot);  // a caller frees the tree's checkpoint slot
    try {
        c.tree.check_invariants();
        FAIL("a checkpoint on a free slot went unnoticed");
    } catch (const kiln::InvariantViolation& e) {
        CHECK(std::string(e.what()).find("free") != std::string::npos);
    }
    std::vector<SlotId> s;
    c.state.allocate(1, s);
    REQUIRE(s[0] == m.state_slot);
    held = {};
    held.slots = {s[0]};  // claiming the tree's slot as one's own is a double owner
    CHECK_THROWS_AS(c.tree.check_invariants(held), kiln::InvariantViolation);
    c.check();
}

TEST_CASE("radix cache: clear empties the tree unless something is locked") {
    Cache c(16);
    auto r = c.put(seq(1, 256), {64, 256});
    c.put(seq(2, 128), {128});
    c.tree.lock(r.tail);
    CHECK_THROWS_AS(c.tree.clear(), kiln::InvalidArgument);
    c.tree.unlock(r.tail);
    c.tree.clear();
    CHECK(c.tree.nodes() == 0);
    CHECK(c.kv.used() == 0);
    CHECK(c.state.used() == 0);
    c.check();
}
