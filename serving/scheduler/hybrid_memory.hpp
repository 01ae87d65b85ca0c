// The engine's two memories in the executor's one arena: KDA state slots (from the arena's start) and
// MLA KV pages (from its end), either as two split pools sized by a start-up ratio or as one unified
// two-ended pool (runtime::UnifiedPool) whose boundary follows the load; and the radix prefix cache
// over them. Both layouts address the arena as model::forward::ForwardBatch does, so the executor
// cannot tell them apart; the unified pool's compaction moves go into each step's batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/forward/batch.hpp"
#include "model/forward/executor.hpp"
#include "runtime/unified_pool.hpp"
#include "serving/engine/engine_options.hpp"
#include "serving/memory/radix_cache.hpp"

namespace kiln::serving::scheduler {

using memory::NodeRef;
using memory::PageId;
using memory::SlotId;

class HybridMemory {
public:
    // Sizes the arena from the options (memory_bytes, the split ratio or the unified pool). Throws
    // InvalidArgument when it cannot hold one sequence.
    HybridMemory(const model::forward::MemorySpec& spec, const ResolvedOptions& options);
    HybridMemory(const HybridMemory&) = delete;
    HybridMemory& operator=(const HybridMemory&) = delete;
    ~HybridMemory();

    uint64_t arena_bytes() const { return arena_bytes_; }
    bool unified() const { return arena_ != nullptr; }
    memory::KvPagePool& kv() { return *kv_; }
    const memory::KvPagePool& kv() const { return *kv_; }
    memory::StateSlotPool& state() { return *state_; }
    const memory::StateSlotPool& state() const { return *state_; }
    memory::RadixCache& tree() { return *tree_; }
    const memory::RadixCache& tree() const { return *tree_; }

    // ForwardBatch indices, valid for the step being built once take_moves() has run.
    int32_t slot_index(SlotId slot) const;
    int32_t page_index(PageId page) const;
    // The unified pool's pending moves, as arena byte moves, acknowledged (nothing on split pools).
    void take_moves(std::vector<model::forward::Move>& out);
    // Changes whenever a KV page that held contents got a new batch index (a compaction move), so a page
    // table translated before is stale.
    uint64_t layout() const { return layout_; }
    bool moves_pending() const { return arena_ && arena_->has_pending_moves(); }

    // Whether `slots` slots and `pages` pages could be had together, counting what evicting the
    // unlocked part of the prefix cache would free (ids, and bytes on the unified pool).
    bool can_fit(size_t slots, size_t pages) const;
    // Evicts unlocked prefix-cache entries until `slots` and `pages` can be allocated together.
    bool make_room(size_t slots, size_t pages);
    // Whether `slots` slots and `pages` pages fit in the empty memory.
    bool fits_alone(size_t slots, size_t pages) const;

    double kv_usage() const;     // 0..1 of the KV memory (of the arena on the unified pool)
    double state_usage() const;  // 0..1 of the state memory (of the arena on the unified pool)
    uint64_t moves() const { return moves_; }
    uint64_t moved_bytes() const { return moved_bytes_; }

    void check_invariants() const;  // both pools and the arena layout; the tree is checked with its holds

private:
    std::unique_ptr<runtime::UnifiedPool> arena_;
    std::unique_ptr<memory::KvPagePool> kv_;
    std::unique_ptr<memory::StateSlotPool> state_;
    std::unique_ptr<memory::RadixCache> tree_;
    uint64_t arena_bytes_ = 0;
    uint64_t slot_bytes_ = 0;
    uint64_t page_bytes_ = 0;
    uint64_t kv_slots_ = 0;  // unified: KV places in the arena
    uint64_t moves_ = 0;
    uint64_t moved_bytes_ = 0;
    uint64_t layout_ = 0;
};

}  // namespace kiln::serving::scheduler
