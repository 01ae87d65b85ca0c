// KDA recurrent-state slots: one slot holds one sequence's fp32 recurrent state and conv state for all
// KDA layers. A slot has exactly one owner at a time, a running request (its working, snapshot and
// reserve slots) or the prefix tree (a checkpoint); ownership passes by handing the id over, never by
// copying on the host. physical(slot) is the slot index for the next step's kernels (see
// block_allocator.hpp: on a unified pool it can change when another slot is freed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "serving/memory/block_allocator.hpp"

namespace kiln::serving::memory {

using SlotId = BlockId;
inline constexpr SlotId no_slot = UINT32_MAX;

class StateSlotPool {
public:
    explicit StateSlotPool(std::unique_ptr<BlockAllocator> blocks);

    // All or nothing: appends n slots and returns true, or returns false.
    bool allocate(size_t n, std::vector<SlotId>& out);
    void free(SlotId slot);  // throws InvalidArgument for a slot that is not allocated
    void free(std::span<const SlotId> slots);
    bool is_allocated(SlotId slot) const { return blocks_->is_allocated(slot); }
    uint32_t physical(SlotId slot) const { return blocks_->physical(slot); }

    size_t capacity() const { return blocks_->capacity(); }
    size_t used() const { return blocks_->used(); }
    size_t available() const { return blocks_->available(); }
    const PoolCounters& counters() const { return counters_; }
    const BlockAllocator& blocks() const { return *blocks_; }

    void check_invariants() const;  // the allocator's invariants and the counters; throws InvariantViolation

private:
    std::unique_ptr<BlockAllocator> blocks_;
    PoolCounters counters_;
};

}  // namespace kiln::serving::memory
