#include "serving/memory/state_slot_pool.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"

namespace kiln::serving::memory {

StateSlotPool::StateSlotPool(std::unique_ptr<BlockAllocator> blocks) : blocks_(std::move(blocks)) {
    if (!blocks_) throw InvalidArgument("state slot pool: no block allocator");
}

bool StateSlotPool::allocate(size_t n, std::vector<SlotId>& out) {
    const bool ok = blocks_->allocate(n, out);
    counters_.on_allocate(ok, n, blocks_->used());
    return ok;
}

void StateSlotPool::free(SlotId slot) {
    if (!blocks_->is_allocated(slot)) throw InvalidArgument(fmt::format("state slot {} is not allocated", slot));
    blocks_->free(slot);
    counters_.on_free(1, blocks_->used());
}

void StateSlotPool::free(std::span<const SlotId> slots) {
    for (SlotId s : slots) free(s);
}

void StateSlotPool::check_invariants() const {
    blocks_->check_invariants();
    if (counters_.used != blocks_->used())
        throw InvariantViolation(fmt::format("state slot pool invariant: {} slots counted, {} allocated", counters_.used,
                                             blocks_->used()));
    if (counters_.allocations - counters_.frees != blocks_->used())
        throw InvariantViolation(fmt::format("state slot pool invariant: {} allocations - {} frees != {} allocated",
                                             counters_.allocations, counters_.frees, blocks_->used()));
}

}  // namespace kiln::serving::memory
