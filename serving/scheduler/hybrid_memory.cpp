#include "serving/scheduler/hybrid_memory.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"

namespace kiln::serving::scheduler {

using memory::FixedBlockAllocator;
using memory::UnifiedBlockAllocator;
using runtime::BlockKind;

namespace {

uint64_t default_memory(const model::forward::MemorySpec& spec, const ResolvedOptions& o) {
    const uint64_t tokens = std::min<uint64_t>(o.max_model_len, 4096);
    const uint64_t pages = (tokens + spec.page_size - 1) / static_cast<uint64_t>(spec.page_size);
    return static_cast<uint64_t>(o.max_running) * (4 * spec.slot_bytes + pages * spec.page_bytes);
}

}  // namespace

HybridMemory::HybridMemory(const model::forward::MemorySpec& spec, const ResolvedOptions& o)
    : slot_bytes_(spec.slot_bytes), page_bytes_(spec.page_bytes) {
    const uint64_t total = o.options.memory_bytes ? o.options.memory_bytes : default_memory(spec, o);
    const auto page_size = static_cast<size_t>(spec.page_size);
    if (o.options.enable_unified_memory) {
        // KV page j of the batch lies (j + 1) pages below the arena's end, so the arena is whole pages.
        arena_bytes_ = total / page_bytes_ * page_bytes_;
        if (arena_bytes_ < slot_bytes_ + page_bytes_)
            throw InvalidArgument(fmt::format("--memory-bytes: {} bytes hold no state slot ({} bytes) next to a KV page "
                                              "({} bytes)", total, slot_bytes_, page_bytes_));
        runtime::UnifiedPoolConfig c;
        c.arena_bytes = arena_bytes_;
        c.state_block_bytes = slot_bytes_;
        c.kv_block_bytes = page_bytes_;
        c.alignment = std::gcd(std::gcd(slot_bytes_, page_bytes_), uint64_t{256});
        arena_ = std::make_unique<runtime::UnifiedPool>(c);
        kv_slots_ = arena_bytes_ / page_bytes_;
        kv_ = std::make_unique<memory::KvPagePool>(std::make_unique<UnifiedBlockAllocator>(*arena_, BlockKind::kv),
                                                   page_size);
        state_ = std::make_unique<memory::StateSlotPool>(std::make_unique<UnifiedBlockAllocator>(*arena_, BlockKind::state));
    } else {
        const auto slots = static_cast<uint64_t>(static_cast<double>(total) * o.options.state_memory_fraction) / slot_bytes_;
        const uint64_t pages = slots * slot_bytes_ <= total ? (total - slots * slot_bytes_) / page_bytes_ : 0;
        if (slots < 1 || pages < 1)
            throw InvalidArgument(fmt::format("--memory-bytes: {} bytes split {:.2f} : {:.2f} give {} state slots and {} KV "
                                              "pages; each needs at least one", total, o.options.state_memory_fraction,
                                              1.0 - o.options.state_memory_fraction, slots, pages));
        arena_bytes_ = slots * slot_bytes_ + pages * page_bytes_;
        kv_ = std::make_unique<memory::KvPagePool>(std::make_unique<FixedBlockAllocator>(pages), page_size);
        state_ = std::make_unique<memory::StateSlotPool>(std::make_unique<FixedBlockAllocator>(slots));
    }
    memory::RadixCacheConfig rc;
    rc.chunk = static_cast<size_t>(spec.chunk);
    rc.max_checkpoints_per_path = o.options.max_checkpoints_per_path;
    tree_ = std::make_unique<memory::RadixCache>(*kv_, *state_, rc);
}

HybridMemory::~HybridMemory() = default;

int32_t HybridMemory::slot_index(SlotId slot) const { return static_cast<int32_t>(state_->physical(slot)); }

int32_t HybridMemory::page_index(PageId page) const {
    const uint32_t p = kv_->physical(page);
    return static_cast<int32_t>(arena_ ? kv_slots_ - 1 - p : p);
}

void HybridMemory::take_moves(std::vector<model::forward::Move>& out) {
    if (!arena_) return;
    for (const runtime::PoolMove& m : arena_->take_moves()) {
        out.push_back({m.src, m.dst, m.bytes});
        ++moves_;
        moved_bytes_ += m.bytes;
        if (m.kind == BlockKind::kv) layout_ = moves_;
    }
}

bool HybridMemory::can_fit(size_t slots, size_t pages) const {
    const size_t ckpt = tree_->evictable_checkpoints(), cached = tree_->evictable_pages();
    if (!arena_) return slots <= state_->available() + ckpt && pages <= kv_->available() + cached;
    if (slots > arena_->free_ids(BlockKind::state) + ckpt || pages > arena_->free_ids(BlockKind::kv) + cached) return false;
    using wide = unsigned __int128;
    return wide(slots) * slot_bytes_ + wide(pages) * page_bytes_ <=
           wide(arena_->gap_bytes()) + wide(ckpt) * slot_bytes_ + wide(cached) * page_bytes_;
}

bool HybridMemory::make_room(size_t slots, size_t pages) {
    for (;;) {
        const memory::Shortfall sf = memory::shortfall(state_->blocks(), slots, kv_->blocks(), pages);
        if (sf.ok()) return true;
        size_t freed = 0;
        if (sf.state_ids) freed += tree_->evict_checkpoints(sf.state_ids).slots_freed;
        if (sf.kv_ids) freed += tree_->evict_kv(sf.kv_ids).pages_freed;
        if (sf.bytes) {
            // Bytes come back from either kind; evict the kind being asked for first.
            const auto evict = [&](bool state_first) {
                const memory::EvictResult e = state_first ? tree_->evict_checkpoints(sf.state_blocks_for_bytes)
                                                          : tree_->evict_kv(sf.kv_blocks_for_bytes);
                return e.pages_freed * page_bytes_ + e.slots_freed * slot_bytes_;
            };
            const bool state_first = slots > 0;
            uint64_t got = evict(state_first);
            if (got < sf.bytes) got += evict(!state_first);
            freed += got;
        }
        if (freed == 0) return false;
    }
}

bool HybridMemory::fits_alone(size_t slots, size_t pages) const {
    if (slots > state_->capacity() || pages > kv_->capacity()) return false;
    using wide = unsigned __int128;
    return !arena_ || wide(slots) * slot_bytes_ + wide(pages) * page_bytes_ <= arena_bytes_;
}

double HybridMemory::kv_usage() const {
    if (!arena_) return static_cast<double>(kv_->used()) / static_cast<double>(kv_->capacity());
    return static_cast<double>(kv_->used() * page_bytes_) / static_cast<double>(arena_bytes_);
}

double HybridMemory::state_usage() const {
    if (!arena_) return static_cast<double>(state_->used()) / static_cast<double>(state_->capacity());
    return static_cast<double>(state_->used() * slot_bytes_) / static_cast<double>(arena_bytes_);
}

void HybridMemory::check_invariants() const {
    kv_->check_invariants();
    state_->check_invariants();
    if (!arena_ && state_->capacity() * slot_bytes_ + kv_->capacity() * page_bytes_ > arena_bytes_)
        throw InvariantViolation("engine memory: the split pools overlap in the arena");
}

}  // namespace kiln::serving::scheduler
