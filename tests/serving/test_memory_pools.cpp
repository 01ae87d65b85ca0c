#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"
#include "runtime/unified_pool.hpp"
#include "serving/memory/block_allocator.hpp"
#include "serving/memory/kv_page_pool.hpp"
#include "serving/memory/state_slot_pool.hpp"

using namespace kiln::serving::memory;
using kiln::runtime::BlockKind;
using kiln::runtime::UnifiedPool;
using kiln::runtime::UnifiedPoolConfig;

namespace {

UnifiedPoolConfig arena_config() {
    UnifiedPoolConfig c;
    c.arena_bytes = 64 * 32;  // 32 KV pages or 4 states of 512 bytes
    c.state_block_bytes = 512;
    c.kv_block_bytes = 64;
    c.alignment = 64;
    return c;
}

}  // namespace

TEST_CASE("fixed block allocator: all or nothing, ids are physical indices") {
    FixedBlockAllocator a(4);
    std::vector<BlockId> ids;
    CHECK(a.allocate(3, ids));
    CHECK(ids == std::vector<BlockId>{0, 1, 2});
    CHECK(a.physical(2) == 2);
    CHECK_FALSE(a.allocate(2, ids));
    CHECK(ids.size() == 3);
    CHECK(a.available() == 1);
    a.free(1);
    CHECK_FALSE(a.is_allocated(1));
    CHECK_THROWS_AS(a.free(1), kiln::InvalidArgument);
    CHECK_THROWS_AS(a.physical(1), kiln::InvalidArgument);
    CHECK_THROWS_AS(a.free(7), kiln::InvalidArgument);
    CHECK(a.allocate(2, ids));
    CHECK(a.used() == 4);
    a.check_invariants();
    CHECK_THROWS_AS(FixedBlockAllocator(0), kiln::InvalidArgument);
}

TEST_CASE("KV page pool: reference counts share pages and free them at zero") {
    KvPagePool kv(std::make_unique<FixedBlockAllocator>(8), 16);
    CHECK(kv.page_size() == 16);
    CHECK(kv.pages_for(0) == 0);
    CHECK(kv.pages_for(1) == 1);
    CHECK(kv.pages_for(16) == 1);
    CHECK(kv.pages_for(17) == 2);

    std::vector<PageId> p;
    REQUIRE(kv.allocate(3, p));
    CHECK(kv.refcount(p[0]) == 1);
    kv.retain(p[0]);
    CHECK(kv.refcount(p[0]) == 2);
    CHECK(kv.shared() == 1);
    kv.check_invariants();
    CHECK_FALSE(kv.release(p[0]));
    CHECK(kv.shared() == 0);
    CHECK(kv.release(p[0]));
    CHECK(kv.refcount(p[0]) == 0);
    CHECK(kv.used() == 2);
    CHECK_THROWS_AS(kv.release(p[0]), kiln::InvalidArgument);
    CHECK_THROWS_AS(kv.retain(p[0]), kiln::InvalidArgument);
    CHECK_THROWS_AS(kv.refcount(99), kiln::InvalidArgument);

    std::vector<PageId> q;
    CHECK_FALSE(kv.allocate(7, q));  // 6 free: all or nothing
    CHECK(q.empty());
    CHECK(kv.allocate(6, q));
    CHECK(kv.used() == 8);
    const std::vector<PageId> both = {p[1], p[2]};
    CHECK(kv.release(both) == 2);
    kv.check_invariants();
    CHECK(kv.counters().allocations == 9);
    CHECK(kv.counters().failed_allocations == 1);
    CHECK(kv.counters().frees == 3);
    CHECK(kv.counters().peak == 8);
    CHECK(kv.counters().used == 6);
}

TEST_CASE("state slot pool: single owner, counters, misuse throws") {
    StateSlotPool st(std::make_unique<FixedBlockAllocator>(4));
    std::vector<SlotId> s;
    REQUIRE(st.allocate(4, s));
    CHECK_FALSE(st.allocate(1, s));
    st.free(s[1]);
    CHECK_THROWS_AS(st.free(s[1]), kiln::InvalidArgument);
    CHECK(st.available() == 1);
    CHECK(st.counters().peak == 4);
    CHECK(st.counters().failed_allocations == 1);
    st.check_invariants();
    const std::vector<SlotId> rest = {s[0], s[2], s[3]};
    st.free(rest);
    CHECK(st.used() == 0);
    st.check_invariants();
}

TEST_CASE("pools on a unified pool: ids stay, physical places follow the moves") {
    UnifiedPool arena(arena_config());
    KvPagePool kv(std::make_unique<UnifiedBlockAllocator>(arena, BlockKind::kv), 4);
    StateSlotPool st(std::make_unique<UnifiedBlockAllocator>(arena, BlockKind::state));
    CHECK(kv.capacity() == 32);
    CHECK(st.capacity() == 4);

    std::vector<PageId> p;
    REQUIRE(kv.allocate(4, p));
    std::vector<SlotId> s;
    REQUIRE(st.allocate(2, s));
    CHECK(kv.physical(p[0]) == 31);
    CHECK(kv.physical(p[3]) == 28);
    CHECK(st.physical(s[1]) == 1);
    arena.acknowledge_moves();

    kv.retain(p[3]);
    CHECK(kv.release(p[1]));  // in the middle: p[3] moves up into its place
    CHECK(kv.physical(p[3]) == 30);
    CHECK(kv.refcount(p[3]) == 2);
    st.free(s[0]);
    CHECK(st.physical(s[1]) == 0);
    auto moves = arena.take_moves();
    CHECK(moves.size() == 2);
    kv.check_invariants();
    st.check_invariants();
}

TEST_CASE("shortfall: split pools lack ids only, a unified pool also lacks bytes") {
    FixedBlockAllocator state_split(2), kv_split(10);
    std::vector<BlockId> ids;
    REQUIRE(state_split.allocate(2, ids));
    Shortfall sf = shortfall(state_split, 1, kv_split, 12);
    CHECK(sf.state_ids == 1);
    CHECK(sf.kv_ids == 2);
    CHECK(sf.bytes == 0);

    UnifiedPool arena(arena_config());
    KvPagePool kv(std::make_unique<UnifiedBlockAllocator>(arena, BlockKind::kv), 4);
    StateSlotPool st(std::make_unique<UnifiedBlockAllocator>(arena, BlockKind::state));
    std::vector<PageId> pages;
    REQUIRE(kv.allocate(28, pages));  // 256 bytes left: half a state
    sf = shortfall(st.blocks(), 1, kv.blocks(), 0);
    CHECK(sf.state_ids == 0);
    CHECK(sf.bytes == 256);
    CHECK(sf.kv_blocks_for_bytes == 4);
    std::vector<SlotId> s;
    CHECK_FALSE(st.allocate(1, s));
    CHECK(st.counters().failed_allocations == 1);
    CHECK(st.available() == 0);

    // Freeing the pages the shortfall names admits the state.
    for (size_t i = 0; i < sf.kv_blocks_for_bytes; ++i) kv.release(pages[i * 7]);
    CHECK(shortfall(st.blocks(), 1, kv.blocks(), 0).ok());
    CHECK(st.allocate(1, s));
    CHECK(shortfall(st.blocks(), 0, kv.blocks(), 1).bytes == 64);

    CHECK_THROWS_AS(shortfall(kv.blocks(), 1, st.blocks(), 0), kiln::InvalidArgument);  // kinds swapped
    CHECK_THROWS_AS(shortfall(st.blocks(), 1, kv_split, 0), kiln::InvalidArgument);      // different pools
    kv.check_invariants();
    st.check_invariants();
}
