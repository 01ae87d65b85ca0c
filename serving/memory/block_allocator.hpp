// Where KV pages and state slots come from: a BlockAllocator hands out ids of one kind of fixed-size
// device block. Two implementations, so the pools above them and the engine do not care which:
//   FixedBlockAllocator    a split pool of fixed capacity; an id is its physical index, forever.
//   UnifiedBlockAllocator  one kind of a runtime::UnifiedPool shared with the other kind; the physical
//                          index of an id can change when a block of the same kind is freed (the engine
//                          enqueues the pool's pending moves once per step, see runtime/unified_pool.hpp).
// physical(id) is what page tables and slot-index tensors hold; read it when building each step.
// shortfall() answers admission for both kinds together: on split pools only ids can be missing; on a
// unified pool gap bytes can be missing too, which freeing blocks of either kind covers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/unified_pool.hpp"

namespace kiln::serving::memory {

using BlockId = uint32_t;
using runtime::Shortfall;

class BlockAllocator {
public:
    virtual ~BlockAllocator() = default;
    // All or nothing: appends n ids and returns true, or changes nothing and returns false.
    virtual bool allocate(size_t n, std::vector<BlockId>& out) = 0;
    virtual void free(BlockId id) = 0;  // throws InvalidArgument for an id that is not allocated
    virtual bool is_allocated(BlockId id) const = 0;
    virtual uint32_t physical(BlockId id) const = 0;
    virtual size_t capacity() const = 0;   // ids
    virtual size_t used() const = 0;
    virtual size_t available() const = 0;  // how many fit now (ids, and bytes on a unified pool)
    // The unified pool this allocator draws from, or null for a split pool.
    virtual const runtime::UnifiedPool* arena() const { return nullptr; }
    virtual void check_invariants() const = 0;
};

class FixedBlockAllocator final : public BlockAllocator {
public:
    explicit FixedBlockAllocator(size_t capacity);
    bool allocate(size_t n, std::vector<BlockId>& out) override;
    void free(BlockId id) override;
    bool is_allocated(BlockId id) const override { return id < live_.size() && live_[id]; }
    uint32_t physical(BlockId id) const override;
    size_t capacity() const override { return live_.size(); }
    size_t used() const override { return live_.size() - free_.size(); }
    size_t available() const override { return free_.size(); }
    void check_invariants() const override;

private:
    std::vector<uint8_t> live_;
    std::vector<BlockId> free_;  // a stack, lowest id on top at start
};

class UnifiedBlockAllocator final : public BlockAllocator {
public:
    // The pool must outlive the allocator.
    UnifiedBlockAllocator(runtime::UnifiedPool& pool, runtime::BlockKind kind) : pool_(pool), kind_(kind) {}
    bool allocate(size_t n, std::vector<BlockId>& out) override { return pool_.allocate(kind_, n, out); }
    void free(BlockId id) override { pool_.free(kind_, id); }
    bool is_allocated(BlockId id) const override { return pool_.is_live(kind_, id); }
    uint32_t physical(BlockId id) const override { return pool_.index(kind_, id); }
    size_t capacity() const override { return pool_.max_ids(kind_); }
    size_t used() const override { return pool_.live(kind_); }
    size_t available() const override { return pool_.fits(kind_); }
    const runtime::UnifiedPool* arena() const override { return &pool_; }
    void check_invariants() const override { pool_.check_invariants(); }
    runtime::BlockKind kind() const { return kind_; }

private:
    runtime::UnifiedPool& pool_;
    runtime::BlockKind kind_;
};

// What allocating n_state state blocks and n_kv KV blocks together lacks. Throws InvalidArgument when
// `state` and `kv` are not a state allocator and a KV allocator of the same unified pool, or two split pools.
Shortfall shortfall(const BlockAllocator& state, size_t n_state, const BlockAllocator& kv, size_t n_kv);

// Usage counters kept by the pools above the allocators.
struct PoolCounters {
    size_t used = 0;
    size_t peak = 0;
    uint64_t allocations = 0;         // ids handed out
    uint64_t failed_allocations = 0;  // allocate() calls refused
    uint64_t frees = 0;

    void on_allocate(bool ok, size_t n, size_t used_now);
    void on_free(size_t n, size_t used_now);
};

}  // namespace kiln::serving::memory
