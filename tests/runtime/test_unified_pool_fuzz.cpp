// A million random operations on the unified pool over a host byte arena that stands in for the GPU.
// Each block is stamped with its kind, id and a generation; frees, allocations, writes by the step in
// flight (at the block's old place, before the moves) and step boundaries (the pending moves applied
// as memcpy in a random order, then the next step writing at the new places) are simulated, and after
// every operation the invariant checker runs and every live block's bytes are checked intact.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/unified_pool.hpp"

using namespace kiln::runtime;

namespace {

constexpr size_t kArena = 3000;  // not a multiple of either block size
constexpr size_t kStateBytes = 96;
constexpr size_t kKvBytes = 32;

struct ModelBlock {
    bool live = false;
    bool written = false;  // has contents (was live at a step boundary)
    size_t place = 0;      // where its bytes are
    uint64_t generation = 0;
    std::vector<uint64_t> expected;  // its contents since the last stamp
};

uint64_t word(BlockKind kind, uint32_t id, uint64_t generation, size_t w) {
    uint64_t x = (uint64_t(kind) << 62) ^ (uint64_t(id) << 40) ^ (generation << 8) ^ w;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    return x ^ (x >> 29);
}

class Model {
public:
    Model(UnifiedPool& pool, uint64_t seed) : pool_(pool), rng_(seed), bytes_(kArena / 8) {
        blocks_[0].resize(pool.max_ids(BlockKind::state));
        blocks_[1].resize(pool.max_ids(BlockKind::kv));
        poison(0, kArena);
    }

    void run(size_t ops) {
        for (size_t op = 0; op < ops; ++op) {
            // The mix shifts: states grow while KV shrinks, then the reverse, then both balanced.
            const int phase = static_cast<int>(op / 40000 % 3);
            const double r = unit();
            if (r < 0.85) {
                const BlockKind kind = rng_() % 2 ? BlockKind::state : BlockKind::kv;
                const double grow = phase == 2 ? 0.5 : (phase == 0) == (kind == BlockKind::state) ? 0.6 : 0.4;
                if (unit() < grow) allocate(kind, 1 + rng_() % 3);
                else free_some(kind, 1 + rng_() % 3);
            } else if (r < 0.92) {
                write_in_flight();
            } else {
                step();
            }
            pool_.check_invariants();
            verify_bytes();
            if (op % 1024 == 0) verify_counts();
        }
        for (int k = 0; k < 2; ++k)
            for (uint32_t id = 0; id < blocks_[k].size(); ++id)
                if (blocks_[k][id].live) free_id(static_cast<BlockKind>(k), id);
        step();
        pool_.check_invariants();
        CHECK(pool_.live(BlockKind::state) == 0);
        CHECK(pool_.live(BlockKind::kv) == 0);
        CHECK(pool_.gap_bytes() == kArena / kKvBytes * kKvBytes);
        CHECK(pool_.counters().moves > 1000);
        CHECK(allocation_failures_[0] > 100);
        CHECK(allocation_failures_[1] > 100);
        CHECK(id_shortfalls_ > 100);
        CHECK(byte_shortfalls_[0] > 100);
    }

private:
    double unit() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
    std::vector<ModelBlock>& of(BlockKind kind) { return blocks_[kind == BlockKind::kv]; }
    size_t block_bytes(BlockKind kind) const { return kind == BlockKind::state ? kStateBytes : kKvBytes; }

    size_t live(BlockKind kind) {
        size_t n = 0;
        for (const ModelBlock& b : of(kind)) n += b.live;
        return n;
    }

    void stamp(BlockKind kind, uint32_t id) {
        ModelBlock& b = of(kind)[id];
        ++b.generation;
        b.expected.resize(block_bytes(kind) / 8);
        for (size_t w = 0; w < b.expected.size(); ++w) b.expected[w] = word(kind, id, b.generation, w);
        std::memcpy(&bytes_[b.place / 8], b.expected.data(), block_bytes(kind));
    }

    void poison(size_t offset, size_t n) {
        for (size_t w = offset / 8; w < (offset + n) / 8; ++w) bytes_[w] = rng_();
    }

    void allocate(BlockKind kind, size_t n) {
        // The pool's answer must follow from the model's own counts.
        const size_t state_live = live(BlockKind::state), kv_live = live(BlockKind::kv);
        const size_t free_ids = of(kind).size() - (kind == BlockKind::state ? state_live : kv_live);
        const size_t need = (state_live + (kind == BlockKind::state ? n : 0)) * kStateBytes +
                            (kv_live + (kind == BlockKind::kv ? n : 0)) * kKvBytes;
        const size_t top = kArena / kKvBytes * kKvBytes;
        const bool ids_ok = free_ids >= n, bytes_ok = need <= top;
        const Shortfall sf = pool_.shortfall(kind == BlockKind::state ? n : 0, kind == BlockKind::kv ? n : 0);
        REQUIRE(sf.ok() == (ids_ok && bytes_ok));
        REQUIRE((kind == BlockKind::state ? sf.state_ids : sf.kv_ids) == (ids_ok ? 0 : n - free_ids));
        REQUIRE(sf.bytes == (bytes_ok ? 0 : need - top));
        REQUIRE(sf.kv_blocks_for_bytes * kKvBytes >= sf.bytes);
        REQUIRE(sf.kv_blocks_for_bytes * kKvBytes < sf.bytes + kKvBytes);
        if (!ids_ok && kind == BlockKind::state) ++id_shortfalls_;
        if (!bytes_ok) ++byte_shortfalls_[kind == BlockKind::kv];

        std::vector<uint32_t> ids;
        const bool ok = pool_.allocate(kind, n, ids);
        REQUIRE(ok == sf.ok());
        if (!ok) {
            REQUIRE(ids.empty());
            ++allocation_failures_[kind == BlockKind::kv];
            return;
        }
        REQUIRE(ids.size() == n);
        for (uint32_t id : ids) {
            ModelBlock& b = of(kind)[id];
            REQUIRE_FALSE(b.live);
            b.live = true;
            b.written = false;  // nothing writes it before the next step boundary
        }
    }

    void free_id(BlockKind kind, uint32_t id) {
        ModelBlock& b = of(kind)[id];
        // The step in flight may still write a freed block, at the place it knows.
        if (b.written) poison(b.place, block_bytes(kind));
        pool_.free(kind, id);
        b.live = false;
        b.written = false;
    }

    void free_some(BlockKind kind, size_t n) {
        std::vector<uint32_t> ids;
        for (uint32_t id = 0; id < of(kind).size(); ++id)
            if (of(kind)[id].live) ids.push_back(id);
        std::shuffle(ids.begin(), ids.end(), rng_);
        for (size_t i = 0; i < n && i < ids.size(); ++i) free_id(kind, ids[i]);
    }

    void write_in_flight() {
        const BlockKind kind = rng_() % 2 ? BlockKind::state : BlockKind::kv;
        std::vector<uint32_t> ids;
        for (uint32_t id = 0; id < of(kind).size(); ++id)
            if (of(kind)[id].written) ids.push_back(id);
        if (!ids.empty()) stamp(kind, ids[rng_() % ids.size()]);
    }

    void step() {
        std::vector<PoolMove> moves = pool_.pending_moves();
        std::vector<std::vector<uint8_t>> moved(2);
        moved[0].assign(of(BlockKind::state).size(), 0);
        moved[1].assign(of(BlockKind::kv).size(), 0);
        for (const PoolMove& m : moves) {
            const ModelBlock& b = of(m.kind)[m.id];
            REQUIRE(b.live);
            REQUIRE(b.written);
            REQUIRE(m.src == b.place);
            REQUIRE(m.dst == pool_.offset(m.kind, m.id));
            REQUIRE(m.bytes == block_bytes(m.kind));
            REQUIRE_FALSE(moved[m.kind == BlockKind::kv][m.id]++);
        }
        for (int k = 0; k < 2; ++k)
            for (uint32_t id = 0; id < blocks_[k].size(); ++id) {
                const ModelBlock& b = blocks_[k][id];
                if (b.written && !moved[k][id] && pool_.offset(static_cast<BlockKind>(k), id) != b.place)
                    FAIL("block " << id << " changed place without a pending move");
            }
        // The moves are independent: any order gives the same bytes.
        std::shuffle(moves.begin(), moves.end(), rng_);
        for (const PoolMove& m : moves)
            std::memcpy(&bytes_[m.dst / 8], &bytes_[m.src / 8], m.bytes);
        pool_.acknowledge_moves();
        REQUIRE_FALSE(pool_.has_pending_moves());

        // The next step: every live block is written at its new place; nothing else is meaningful.
        std::vector<uint8_t> used(kArena / 8, 0);
        for (int k = 0; k < 2; ++k) {
            const BlockKind kind = static_cast<BlockKind>(k);
            for (uint32_t id = 0; id < blocks_[k].size(); ++id) {
                ModelBlock& b = blocks_[k][id];
                if (!b.live) continue;
                b.place = pool_.offset(kind, id);
                for (size_t w = 0; w < block_bytes(kind) / 8; ++w)
                    if (used[b.place / 8 + w]++) FAIL("two live blocks overlap at byte " << b.place + 8 * w);
                if (!b.written || unit() < 0.3) stamp(kind, id);
                b.written = true;
            }
        }
        for (size_t w = 0; w < used.size(); ++w)
            if (!used[w]) bytes_[w] = rng_();
    }

    void verify_bytes() {
        for (int k = 0; k < 2; ++k) {
            const BlockKind kind = static_cast<BlockKind>(k);
            for (uint32_t id = 0; id < blocks_[k].size(); ++id) {
                const ModelBlock& b = blocks_[k][id];
                if (!b.live || !b.written) continue;
                if (std::memcmp(&bytes_[b.place / 8], b.expected.data(), block_bytes(kind)) != 0)
                    FAIL("the bytes of " << to_string(kind) << " block " << id << " (generation " << b.generation
                                         << ") are damaged");
            }
        }
    }

    void verify_counts() {
        for (BlockKind kind : {BlockKind::state, BlockKind::kv}) {
            REQUIRE(pool_.live(kind) == live(kind));
            REQUIRE(pool_.free_ids(kind) + live(kind) == of(kind).size());
        }
        REQUIRE(pool_.state_end() == live(BlockKind::state) * kStateBytes);
        REQUIRE(pool_.kv_begin() == (kArena / kKvBytes - live(BlockKind::kv)) * kKvBytes);
    }

    UnifiedPool& pool_;
    std::mt19937_64 rng_;
    std::vector<uint64_t> bytes_;
    std::vector<ModelBlock> blocks_[2];
    size_t allocation_failures_[2] = {0, 0};
    size_t id_shortfalls_ = 0;
    size_t byte_shortfalls_[2] = {0, 0};
};

}  // namespace

TEST_CASE("unified pool fuzz: a million operations keep the invariants and every live block's bytes") {
    UnifiedPoolConfig c;
    c.arena_bytes = kArena;
    c.state_block_bytes = kStateBytes;
    c.kv_block_bytes = kKvBytes;
    c.max_state_blocks = 14;  // fewer state ids than would fit: both constraints bind at times
    c.alignment = 8;
    UnifiedPool pool(c);
    Model model(pool, 0x6b696c6e);
    model.run(1000000);
}
