// MLA KV pages: page_size tokens of every MLA layer per page, reference counted.
//
// A page is shared by whoever holds a reference: the prefix tree holds one for each page on its nodes,
// and a running request holds one for each page in its page table. allocate() hands out pages with one
// reference each (the caller's); retain() adds one, release() drops one and frees the page at zero.
// physical(page) is the page-table entry for the next step (see block_allocator.hpp: on a unified pool
// it can change when another KV page is freed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "serving/memory/block_allocator.hpp"

namespace kiln::serving::memory {

using PageId = BlockId;

class KvPagePool {
public:
    KvPagePool(std::unique_ptr<BlockAllocator> blocks, size_t page_size);

    size_t page_size() const { return page_size_; }
    size_t pages_for(size_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

    // All or nothing: appends n pages, each with one reference, and returns true; or returns false.
    bool allocate(size_t n, std::vector<PageId>& out);
    void retain(PageId page);
    void retain(std::span<const PageId> pages);
    bool release(PageId page);                     // true when this freed the page
    size_t release(std::span<const PageId> pages);  // pages freed
    uint32_t refcount(PageId page) const;           // 0 for a free page
    uint32_t physical(PageId page) const { return blocks_->physical(page); }

    size_t capacity() const { return blocks_->capacity(); }
    size_t used() const { return blocks_->used(); }
    size_t available() const { return blocks_->available(); }
    size_t shared() const { return shared_; }  // pages with more than one reference
    const PoolCounters& counters() const { return counters_; }
    const BlockAllocator& blocks() const { return *blocks_; }

    // Reference counts agree with the allocator (nonzero exactly for allocated pages), the shared count,
    // and the allocator's own invariants. Throws InvariantViolation.
    void check_invariants() const;

private:
    std::unique_ptr<BlockAllocator> blocks_;
    size_t page_size_;
    std::vector<uint32_t> refs_;
    size_t shared_ = 0;
    PoolCounters counters_;
};

}  // namespace kiln::serving::memory
