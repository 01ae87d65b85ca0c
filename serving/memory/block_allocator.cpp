#include "serving/memory/block_allocator.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"

namespace kiln::serving::memory {

FixedBlockAllocator::FixedBlockAllocator(size_t capacity) : live_(capacity, 0) {
    if (capacity == 0 || capacity >= UINT32_MAX) throw InvalidArgument(fmt::format("block pool capacity {} is out of range", capacity));
    free_.resize(capacity);
    for (size_t i = 0; i < capacity; ++i) free_[i] = static_cast<BlockId>(capacity - 1 - i);
}

bool FixedBlockAllocator::allocate(size_t n, std::vector<BlockId>& out) {
    if (n > free_.size()) return false;
    out.reserve(out.size() + n);
    for (size_t i = 0; i < n; ++i) {
        const BlockId id = free_.back();
        free_.pop_back();
        live_[id] = 1;
        out.push_back(id);
    }
    return true;
}

void FixedBlockAllocator::free(BlockId id) {
    if (!is_allocated(id)) throw InvalidArgument(fmt::format("block {} is not allocated", id));
    live_[id] = 0;
    free_.push_back(id);
}

uint32_t FixedBlockAllocator::physical(BlockId id) const {
    if (!is_allocated(id)) throw InvalidArgument(fmt::format("block {} is not allocated", id));
    return id;
}

void FixedBlockAllocator::check_invariants() const {
    std::vector<uint8_t> seen(live_.size(), 0);
    for (BlockId id : free_) {
        if (id >= live_.size() || seen[id]++ || live_[id])
            throw InvariantViolation(fmt::format("block pool invariant: free id {} is out of range, listed twice or live", id));
    }
    const size_t live = static_cast<size_t>(std::count(live_.begin(), live_.end(), uint8_t{1}));
    if (live + free_.size() != live_.size())
        throw InvariantViolation(fmt::format("block pool invariant: {} live + {} free != capacity {}", live, free_.size(),
                                             live_.size()));
}

Shortfall shortfall(const BlockAllocator& state, size_t n_state, const BlockAllocator& kv, size_t n_kv) {
    const runtime::UnifiedPool* arena = state.arena();
    if (arena != kv.arena())
        throw InvalidArgument("shortfall: the state and KV allocators must share one unified pool or both be split");
    if (arena) {
        const auto* s = dynamic_cast<const UnifiedBlockAllocator*>(&state);
        const auto* k = dynamic_cast<const UnifiedBlockAllocator*>(&kv);
        if (!s || !k || s->kind() != runtime::BlockKind::state || k->kind() != runtime::BlockKind::kv)
            throw InvalidArgument("shortfall: pass the unified pool's state allocator first, its KV allocator second");
        return arena->shortfall(n_state, n_kv);
    }
    Shortfall r;
    r.state_ids = n_state > state.available() ? n_state - state.available() : 0;
    r.kv_ids = n_kv > kv.available() ? n_kv - kv.available() : 0;
    return r;
}

void PoolCounters::on_allocate(bool ok, size_t n, size_t used_now) {
    if (!ok) {
        ++failed_allocations;
        return;
    }
    allocations += n;
    used = used_now;
    peak = std::max(peak, used);
}

void PoolCounters::on_free(size_t n, size_t used_now) {
    frees += n;
    used = used_now;
}

}  // namespace kiln::serving::memory
