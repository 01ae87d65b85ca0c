#include "serving/memory/kv_page_pool.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"

namespace kiln::serving::memory {

KvPagePool::KvPagePool(std::unique_ptr<BlockAllocator> blocks, size_t page_size)
    : blocks_(std::move(blocks)), page_size_(page_size) {
    if (!blocks_) throw InvalidArgument("KV page pool: no block allocator");
    if (page_size_ == 0) throw InvalidArgument("KV page pool: page size must be positive");
    refs_.assign(blocks_->capacity(), 0);
}

bool KvPagePool::allocate(size_t n, std::vector<PageId>& out) {
    const size_t first = out.size();
    const bool ok = blocks_->allocate(n, out);
    if (ok)
        for (size_t i = first; i < out.size(); ++i) refs_[out[i]] = 1;
    counters_.on_allocate(ok, n, blocks_->used());
    return ok;
}

void KvPagePool::retain(PageId page) {
    if (page >= refs_.size() || refs_[page] == 0)
        throw InvalidArgument(fmt::format("KV page {} is not allocated: cannot retain it", page));
    if (++refs_[page] == 2) ++shared_;
}

void KvPagePool::retain(std::span<const PageId> pages) {
    for (PageId p : pages) retain(p);
}

bool KvPagePool::release(PageId page) {
    if (page >= refs_.size() || refs_[page] == 0)
        throw InvalidArgument(fmt::format("KV page {} is not allocated: cannot release it", page));
    const uint32_t left = --refs_[page];
    if (left == 1) --shared_;
    if (left != 0) return false;
    blocks_->free(page);
    counters_.on_free(1, blocks_->used());
    return true;
}

size_t KvPagePool::release(std::span<const PageId> pages) {
    size_t freed = 0;
    for (PageId p : pages) freed += release(p);
    return freed;
}

uint32_t KvPagePool::refcount(PageId page) const {
    if (page >= refs_.size()) throw InvalidArgument(fmt::format("KV page {} is out of range", page));
    return refs_[page];
}

void KvPagePool::check_invariants() const {
    blocks_->check_invariants();
    size_t shared = 0, referenced = 0;
    for (PageId p = 0; p < refs_.size(); ++p) {
        if ((refs_[p] != 0) != blocks_->is_allocated(p))
            throw InvariantViolation(fmt::format("KV page pool invariant: page {} has {} references but is {}", p,
                                                 refs_[p], blocks_->is_allocated(p) ? "allocated" : "free"));
        referenced += refs_[p] != 0;
        shared += refs_[p] > 1;
    }
    if (shared != shared_)
        throw InvariantViolation(fmt::format("KV page pool invariant: {} shared pages counted as {}", shared, shared_));
    if (referenced != blocks_->used())
        throw InvariantViolation(fmt::format("KV page pool invariant: {} referenced pages but {} allocated", referenced,
                                             blocks_->used()));
}

}  // namespace kiln::serving::memory
