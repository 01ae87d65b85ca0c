#include <doctest/doctest.h>

#include <vector>

#include "runtime/error.hpp"
#include "runtime/unified_pool.hpp"

using namespace kiln::runtime;

namespace {

// 20 KV blocks of 16 bytes or 5 state blocks of 64 bytes.
UnifiedPoolConfig small_config() {
    UnifiedPoolConfig c;
    c.arena_bytes = 320;
    c.state_block_bytes = 64;
    c.kv_block_bytes = 16;
    c.alignment = 16;
    return c;
}

std::vector<uint32_t> alloc(UnifiedPool& pool, BlockKind kind, size_t n) {
    std::vector<uint32_t> ids;
    REQUIRE(pool.allocate(kind, n, ids));
    pool.check_invariants();
    return ids;
}

}  // namespace

TEST_CASE("unified pool: the configuration is validated") {
    UnifiedPoolConfig c = small_config();
    c.alignment = 0;
    CHECK_THROWS_AS(UnifiedPool{c}, kiln::InvalidArgument);
    c = small_config();
    c.state_block_bytes = 72;  // not a multiple of 16
    CHECK_THROWS_AS(UnifiedPool{c}, kiln::InvalidArgument);
    c = small_config();
    c.kv_block_bytes = 0;
    CHECK_THROWS_AS(UnifiedPool{c}, kiln::InvalidArgument);
    c = small_config();
    c.state_block_bytes = 336;  // larger than the arena
    CHECK_THROWS_AS(UnifiedPool{c}, kiln::InvalidArgument);
}

TEST_CASE("unified pool: states fill from the bottom, KV from the top, one gap between") {
    UnifiedPool pool(small_config());
    CHECK(pool.max_ids(BlockKind::state) == 5);
    CHECK(pool.max_ids(BlockKind::kv) == 20);
    CHECK(pool.gap_bytes() == 320);

    auto s = alloc(pool, BlockKind::state, 2);
    auto k = alloc(pool, BlockKind::kv, 3);
    CHECK(pool.offset(BlockKind::state, s[0]) == 0);
    CHECK(pool.offset(BlockKind::state, s[1]) == 64);
    CHECK(pool.index(BlockKind::kv, k[0]) == 19);
    CHECK(pool.offset(BlockKind::kv, k[0]) == 304);
    CHECK(pool.offset(BlockKind::kv, k[2]) == 272);
    CHECK(pool.state_end() == 128);
    CHECK(pool.kv_begin() == 272);
    CHECK(pool.gap_bytes() == 144);
    CHECK(pool.fits(BlockKind::state) == 2);
    CHECK(pool.fits(BlockKind::kv) == 9);
    CHECK(pool.live(BlockKind::state) == 2);
    CHECK(pool.free_ids(BlockKind::kv) == 17);
    CHECK_FALSE(pool.has_pending_moves());
}

TEST_CASE("unified pool: freeing a state in the middle moves the frontier state into the hole") {
    UnifiedPool pool(small_config());
    auto s = alloc(pool, BlockKind::state, 3);
    pool.acknowledge_moves();  // the blocks have been written by a step

    pool.free(BlockKind::state, s[0]);
    pool.check_invariants();
    CHECK(pool.index(BlockKind::state, s[2]) == 0);  // the new place is visible at once
    CHECK(pool.index(BlockKind::state, s[1]) == 1);
    CHECK(pool.state_end() == 128);
    auto moves = pool.pending_moves();
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].kind == BlockKind::state);
    CHECK(moves[0].id == s[2]);
    CHECK(moves[0].src == 128);
    CHECK(moves[0].dst == 0);
    CHECK(moves[0].bytes == 64);
    CHECK(pool.take_moves().size() == 1);
    CHECK_FALSE(pool.has_pending_moves());
    CHECK(pool.counters().moves == 1);
    CHECK(pool.counters().moved_bytes == 64);

    // Freeing the frontier block moves nothing.
    pool.free(BlockKind::state, s[1]);
    pool.check_invariants();
    CHECK(pool.pending_moves().empty());
    CHECK(pool.state_end() == 64);
}

TEST_CASE("unified pool: freeing a KV block in the middle moves the lowest KV block up into the hole") {
    UnifiedPool pool(small_config());
    auto k = alloc(pool, BlockKind::kv, 4);  // indices 19, 18, 17, 16
    pool.acknowledge_moves();
    pool.free(BlockKind::kv, k[0]);
    pool.check_invariants();
    CHECK(pool.index(BlockKind::kv, k[3]) == 19);
    CHECK(pool.kv_begin() == 17 * 16);
    auto moves = pool.take_moves();
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].kind == BlockKind::kv);
    CHECK(moves[0].src == 16 * 16);
    CHECK(moves[0].dst == 19 * 16);
    pool.check_invariants();
}

TEST_CASE("unified pool: a block allocated since the last acknowledgement has no bytes to move") {
    UnifiedPool pool(small_config());
    auto s = alloc(pool, BlockKind::state, 3);
    pool.free(BlockKind::state, s[0]);
    CHECK(pool.index(BlockKind::state, s[2]) == 0);
    CHECK(pool.pending_moves().empty());
    pool.acknowledge_moves();
    pool.check_invariants();
    CHECK(pool.counters().moves == 0);
}

TEST_CASE("unified pool: a block moved twice has one move, and a freed block's move is dropped") {
    UnifiedPool pool(small_config());
    auto s = alloc(pool, BlockKind::state, 4);  // A B C D at 0 1 2 3
    pool.acknowledge_moves();
    pool.free(BlockKind::state, s[1]);  // D: 3 -> 1
    pool.free(BlockKind::state, s[0]);  // C: 2 -> 0
    pool.check_invariants();
    CHECK(pool.pending_moves().size() == 2);
    pool.free(BlockKind::state, s[2]);  // D: 1 -> 0
    pool.check_invariants();
    auto moves = pool.pending_moves();
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].id == s[3]);
    CHECK(moves[0].src == 3 * 64);
    CHECK(moves[0].dst == 0);
    pool.free(BlockKind::state, s[3]);
    CHECK(pool.pending_moves().empty());
    pool.check_invariants();
}

TEST_CASE("unified pool: ids are stable and reused after a free") {
    UnifiedPool pool(small_config());
    auto s = alloc(pool, BlockKind::state, 2);
    pool.free(BlockKind::state, s[0]);
    auto again = alloc(pool, BlockKind::state, 1);
    CHECK(again[0] == s[0]);
    CHECK(pool.index(BlockKind::state, s[1]) == 0);
    CHECK(pool.index(BlockKind::state, again[0]) == 1);
    CHECK(pool.is_live(BlockKind::state, s[1]));
    CHECK_FALSE(pool.is_live(BlockKind::kv, 0));
}

TEST_CASE("unified pool: a state allocation needs a free state id") {
    UnifiedPoolConfig c = small_config();
    c.max_state_blocks = 2;
    UnifiedPool pool(c);
    alloc(pool, BlockKind::state, 2);
    CHECK(pool.gap_bytes() == 192);  // room for three more states, but no id
    Shortfall sf = pool.shortfall(1, 0);
    CHECK(sf.state_ids == 1);
    CHECK(sf.bytes == 0);
    CHECK_FALSE(sf.ok());
    std::vector<uint32_t> out;
    CHECK_FALSE(pool.allocate(BlockKind::state, 1, out));
    CHECK(out.empty());
    CHECK(pool.counters().failed_allocations == 1);
    CHECK(pool.fits(BlockKind::state) == 0);
    pool.check_invariants();
}

TEST_CASE("unified pool: a state allocation needs gap bytes, which only freeing KV provides when KV holds them") {
    UnifiedPool pool(small_config());
    auto s = alloc(pool, BlockKind::state, 2);   // bytes [0, 128)
    auto k = alloc(pool, BlockKind::kv, 11);     // bytes [144, 320)
    pool.acknowledge_moves();
    CHECK(pool.gap_bytes() == 16);
    Shortfall sf = pool.shortfall(1, 0);
    CHECK(sf.state_ids == 0);  // three state ids are free
    CHECK(sf.bytes == 48);
    CHECK(sf.kv_blocks_for_bytes == 3);
    CHECK(sf.state_blocks_for_bytes == 1);
    std::vector<uint32_t> out;
    CHECK_FALSE(pool.allocate(BlockKind::state, 1, out));

    // Evicting a state to admit a state leaves the pool exactly as short as before.
    pool.free(BlockKind::state, s[0]);
    alloc(pool, BlockKind::state, 1);
    CHECK(pool.shortfall(1, 0).bytes == 48);

    // Freeing the KV blocks the shortfall names makes room; middle frees compact the KV side.
    pool.free(BlockKind::kv, k[0]);
    pool.free(BlockKind::kv, k[5]);
    pool.free(BlockKind::kv, k[10]);
    pool.check_invariants();
    CHECK(pool.shortfall(1, 0).ok());
    CHECK(pool.allocate(BlockKind::state, 1, out));
    CHECK(pool.offset(BlockKind::state, out[0]) == 128);
    pool.check_invariants();
    CHECK(pool.take_moves().size() == 3);  // one state and two KV blocks; a third KV block moved, then was freed
    pool.check_invariants();
}

TEST_CASE("unified pool: the shortfall of a joint allocation counts both kinds' bytes") {
    UnifiedPool pool(small_config());
    alloc(pool, BlockKind::state, 1);
    alloc(pool, BlockKind::kv, 10);  // gap: [64, 160) = 96 bytes
    CHECK(pool.shortfall(1, 2).ok());
    Shortfall sf = pool.shortfall(1, 3);
    CHECK(sf.bytes == 16);
    CHECK(sf.kv_blocks_for_bytes == 1);
    sf = pool.shortfall(2, 0);
    CHECK(sf.bytes == 32);
    sf = pool.shortfall(0, 100);
    CHECK(sf.kv_ids == 90);
    CHECK(sf.bytes == 100 * 16 - 96);
}

TEST_CASE("unified pool: freeing a block that is not live throws and changes nothing") {
    UnifiedPool pool(small_config());
    auto s = alloc(pool, BlockKind::state, 1);
    CHECK_THROWS_AS(pool.free(BlockKind::kv, s[0]), kiln::InvalidArgument);
    CHECK_THROWS_AS(pool.free(BlockKind::state, 4), kiln::InvalidArgument);
    CHECK_THROWS_AS(pool.free(BlockKind::state, 99), kiln::InvalidArgument);
    CHECK_THROWS_AS(pool.index(BlockKind::state, 3), kiln::InvalidArgument);
    pool.free(BlockKind::state, s[0]);
    CHECK_THROWS_AS(pool.free(BlockKind::state, s[0]), kiln::InvalidArgument);
    pool.check_invariants();
    CHECK(pool.live(BlockKind::state) == 0);
    CHECK(pool.counters().frees == 1);
}
