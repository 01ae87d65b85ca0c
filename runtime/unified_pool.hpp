// One device byte arena for two kinds of fixed-size blocks, growing from opposite ends: recurrent-state
// blocks (one sequence's state across all KDA layers) fill from offset 0 upwards, KV blocks (one page of
// all MLA layers) fill from the top downwards, and the free bytes form one contiguous gap in the middle.
// This is bookkeeping only: the caller owns the device memory and the copy kernels.
//
// Ids are virtual and stable; a block's place is index(kind, id), and its bytes lie at
// offset = index * block_bytes(kind) from the arena base (so base + index * stride addresses it).
// Freeing a block that is not at its side's frontier moves the frontier block into the hole, which
// changes that block's index at once and leaves a pending move (src -> dst) for its bytes.
//
// The move contract (stream order is the only synchronisation):
//   - Once per step, after the step's allocations and frees and before building its page tables and
//     slot indices, enqueue pending_moves() on the forward stream, then call acknowledge_moves(). Work
//     enqueued earlier keeps using the old places safely: the moves follow it in stream order.
//   - The pending moves are independent (no move writes bytes another one reads), so they may run in
//     any order or as one batched copy kernel. A block moved several times has one move.
//   - A block allocated since the last acknowledgement has no contents yet and never needs a move:
//     write nothing into pool memory between a step's frees and the enqueueing of its moves.
//   - Every read or write of pool memory must be ordered with the forward stream.
//
// An allocation has two independent constraints: a free id of its kind and room in the gap. Evicting
// blocks of one kind frees ids of that kind only, but gap bytes either way: shortfall() says what is
// missing and how many blocks of either kind would cover the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::runtime {

enum class BlockKind : uint8_t { state = 0, kv = 1 };
const char* to_string(BlockKind kind);

struct UnifiedPoolConfig {
    size_t arena_bytes = 0;
    size_t state_block_bytes = 0;  // all KDA layers' recurrent + conv state of one sequence
    size_t kv_block_bytes = 0;     // one KV page of all MLA layers
    size_t max_state_blocks = 0;   // state ids (0: as many as fit in the arena)
    size_t max_kv_blocks = 0;      // KV ids (0: as many as fit in the arena)
    size_t alignment = 256;        // both block sizes must be multiples of it
};

// Copy `bytes` from arena offset `src` to `dst`: block `id` of `kind` now lives at dst.
struct PoolMove {
    size_t src = 0;
    size_t dst = 0;
    size_t bytes = 0;
    BlockKind kind = BlockKind::state;
    uint32_t id = 0;
};

// What an allocation lacks. `bytes` can be covered by freeing either kind: state_blocks_for_bytes state
// blocks or kv_blocks_for_bytes KV blocks (each freed block widens the gap by exactly its size).
struct Shortfall {
    size_t state_ids = 0;
    size_t kv_ids = 0;
    size_t bytes = 0;
    size_t state_blocks_for_bytes = 0;
    size_t kv_blocks_for_bytes = 0;
    bool ok() const { return state_ids == 0 && kv_ids == 0 && bytes == 0; }
};

struct UnifiedPoolCounters {
    uint64_t allocations = 0;         // blocks handed out
    uint64_t failed_allocations = 0;  // allocate() calls refused
    uint64_t frees = 0;
    uint64_t moves = 0;               // acknowledged moves
    uint64_t moved_bytes = 0;
};

class UnifiedPool {
public:
    explicit UnifiedPool(const UnifiedPoolConfig& config);

    // All or nothing: appends n ids to `out` and returns true, or changes nothing and returns false.
    bool allocate(BlockKind kind, size_t n, std::vector<uint32_t>& out);
    void free(BlockKind kind, uint32_t id);  // throws InvalidArgument for an id that is not live

    bool is_live(BlockKind kind, uint32_t id) const;
    uint32_t index(BlockKind kind, uint32_t id) const;  // current place (after pending moves)
    size_t offset(BlockKind kind, uint32_t id) const { return index(kind, id) * block_bytes(kind); }

    Shortfall shortfall(size_t n_state, size_t n_kv) const;  // for allocating both together
    size_t fits(BlockKind kind) const;                       // how many of this kind fit now, alone

    std::vector<PoolMove> pending_moves() const;  // state moves first, each kind by destination
    void acknowledge_moves();                     // the pending moves are enqueued
    std::vector<PoolMove> take_moves();           // pending_moves() then acknowledge_moves()
    bool has_pending_moves() const;

    size_t arena_bytes() const { return cfg_.arena_bytes; }
    size_t block_bytes(BlockKind kind) const { return side(kind).block_bytes; }
    size_t max_ids(BlockKind kind) const { return side(kind).blocks.size(); }
    size_t live(BlockKind kind) const { return side(kind).live; }
    size_t free_ids(BlockKind kind) const { return side(kind).free_ids.size(); }
    size_t state_end() const { return state_.live * state_.block_bytes; }  // first byte of the gap
    size_t kv_begin() const { return kv_low_ * kv_.block_bytes; }          // first byte above the gap
    size_t gap_bytes() const { return kv_begin() - state_end(); }
    const UnifiedPoolCounters& counters() const { return counters_; }

    // Span = live + holes + pending moves on each side (holes must be none), no two blocks overlap
    // (current places and places of the bytes), every id maps to exactly one block and back, the free
    // ids are exactly the ids not live, and the pending moves are safe in their order.
    // Throws InvariantViolation naming the rule.
    void check_invariants() const;

private:
    struct Block {
        uint32_t index = 0;         // current place
        uint32_t device_index = 0;  // where its bytes are as of the last acknowledgement
        bool live = false;
        bool has_content = false;   // live at the last acknowledgement
        bool dirty = false;         // listed in Side::moved
    };
    struct Side {
        size_t block_bytes = 0;
        std::vector<Block> blocks;      // by id
        std::vector<uint32_t> at;       // by index: the id living there (no_id outside the side's span)
        std::vector<uint32_t> free_ids; // a stack
        std::vector<uint32_t> moved;    // ids moved since the last acknowledgement
        std::vector<uint32_t> fresh;    // ids allocated since the last acknowledgement
        size_t live = 0;
    };
    static constexpr uint32_t no_id = UINT32_MAX;

    Side& side(BlockKind kind) { return kind == BlockKind::state ? state_ : kv_; }
    const Side& side(BlockKind kind) const { return kind == BlockKind::state ? state_ : kv_; }
    const Block& live_block(BlockKind kind, uint32_t id) const;
    void place(Side& s, uint32_t id, uint32_t index);
    void move_into_hole(Side& s, uint32_t from, uint32_t hole);
    std::pair<size_t, size_t> check_side(BlockKind kind, uint32_t first, uint32_t last) const;

    UnifiedPoolConfig cfg_;
    Side state_;
    Side kv_;
    uint32_t kv_slots_ = 0;  // KV indices are [kv_low_, kv_slots_)
    uint32_t kv_low_ = 0;
    UnifiedPoolCounters counters_;
};

}  // namespace kiln::runtime
