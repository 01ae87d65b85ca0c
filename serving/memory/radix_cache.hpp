// The prefix cache of a hybrid (KDA + MLA) model: a radix tree over token ids. Every node holds the MLA
// KV pages of its edge (edges are whole pages); a node may also hold a checkpoint, a state slot with the
// KDA state after its last token. Checkpoints sit only on the grid, multiples of lcm(chunk, page_size):
// the chunk boundaries the forward emits states at. A node without one is a tombstone; a leaf never is
// (the tree keeps KV only up to a checkpoint), and a tombstone has at least two children (a childless
// one is removed, one with a single child is merged into it).
//
// Reuse: match_prefix() finds the cached KV (kv_len tokens, whole pages, never the whole prompt: one
// token must be computed) and the deepest checkpoint at or before it (state_len, state_slot). A request
// resumes at state_len: pages[0, state_len / page_size) plus a copy of state_slot into its working slot
// (the zero state when state_len is 0), enqueued on the forward stream. When the KV match goes deeper
// than the checkpoint, branch_len is the grid position the next prefill should emit a checkpoint at, so
// the next request on this path restores there. For an exact repeat of a prompt of length L to hit, emit
// a checkpoint at last_grid_before(L).
//
// Ownership. Pages: the tree holds one reference per page on its nodes. insert() with PageRefs::consume
// takes over the caller's reference on every page passed: kept when the page goes on a node, dropped
// when the prefix was cached already (a duplicate) or lies past the deepest checkpoint. PageRefs::keep
// (a request that goes on running) leaves the caller one reference per page and rewrites
// pages[0, length) to the tree's pages. Slots: a checkpoint's slot always passes to the tree (kept, or
// freed when that node has one already). The tree releases pages and frees slots only in insert() (those
// duplicates), in evictions and in cap pruning.
//
// Locks. lock(node) is what a running request holds on its committed prefix: the node's whole path keeps
// its KV and the node keeps its checkpoint (lock a match's state_node or an insert's tail, or the root).
// Keep the pages you hold references to under such a lock: an unlocked node is evicted from the tree
// even when its pages are still referenced, and then frees nothing. lock_state(node) keeps one node's
// checkpoint, e.g. while it is the source of a copy not yet enqueued. A NodeRef is valid while it is
// locked; using a stale one throws InvalidArgument.
//
// Eviction, each by its own LRU order. evict_kv() removes least recently used unlocked leaves (their KV and
// checkpoint); evict_checkpoints() drops least recently used unlocked checkpoints, interior ones too (the
// node becomes a tombstone and keeps its KV). Both report what they freed. A hit refreshes only the node
// whose checkpoint it consumed; insert() refreshes the nodes it places checkpoints on and its tail. With a
// per-path cap, insert() then prunes the shallowest checkpoints on its path beyond the cap, never the
// tail, a fork (two or more children) or a locked node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "serving/memory/kv_page_pool.hpp"
#include "serving/memory/state_slot_pool.hpp"

namespace kiln::serving::memory {

using Token = int32_t;

struct RadixCacheConfig {
    size_t chunk = 64;                    // the KDA chunk length
    size_t max_checkpoints_per_path = 0;  // 0: no cap
};

struct NodeRef {
    uint32_t index = 0;
    uint32_t generation = 0;
    bool operator==(const NodeRef&) const = default;
};

struct Checkpoint {
    size_t pos = 0;  // on the grid, > 0: the state after tokens[0, pos)
    SlotId slot = no_slot;
};

struct PrefixMatch {
    size_t kv_len = 0;           // cached KV tokens on the path: whole pages, < the prompt length
    std::vector<PageId> pages;   // kv_len / page_size pages (no references taken)
    size_t state_len = 0;        // the deepest checkpoint at or before kv_len; 0: none
    SlotId state_slot = no_slot; // its slot: the copy-on-write source
    size_t branch_len = 0;       // grid position in (state_len, kv_len] to emit a checkpoint at; 0: none
    NodeRef state_node;          // the node ending at state_len (the root when 0)
    NodeRef kv_node;             // the deepest node the KV match reaches (the root when kv_len is 0)
};

enum class PageRefs { consume, keep };

struct InsertResult {
    size_t length = 0;             // the tree now holds tokens[0, length): the deepest checkpoint given
    size_t cached_tokens = 0;      // of those, already cached before
    size_t new_tokens = 0;
    size_t duplicate_pages = 0;    // caller pages that duplicated cached ones (released)
    size_t pages_freed = 0;        // caller pages this call returned to the pool
    size_t checkpoints_added = 0;
    size_t checkpoints_duplicate = 0;  // slots freed: the node had a checkpoint already
    size_t checkpoints_pruned = 0;     // by the per-path cap
    NodeRef tail;                  // the node ending at length (the root when 0)
};

struct EvictResult {
    size_t pages_freed = 0;  // returned to the KV pool
    size_t slots_freed = 0;  // returned to the state pool
    size_t nodes_removed = 0;
};

struct PrefixCacheStats {
    uint64_t queries = 0;
    uint64_t query_tokens = 0;
    uint64_t hit_tokens = 0;     // sum of state_len: tokens a request can skip
    uint64_t kv_hit_tokens = 0;  // sum of kv_len
    uint64_t inserted_tokens = 0;
    uint64_t duplicate_pages = 0;
    uint64_t evicted_pages = 0;
    uint64_t evicted_checkpoints = 0;
    uint64_t pruned_checkpoints = 0;
};

// What callers hold outside the tree, so check_invariants() can account for every reference exactly:
// one entry per page reference (every page of every page table) and every slot a request owns.
struct OutsideHolds {
    std::vector<PageId> pages;
    std::vector<SlotId> slots;
};

class RadixCache {
public:
    // The pools must outlive the cache; the KV pool's page size is the tree's. The destructor leaves the
    // pools alone: call clear() first if they live on.
    RadixCache(KvPagePool& kv, StateSlotPool& state, RadixCacheConfig config = {});
    RadixCache(const RadixCache&) = delete;
    RadixCache& operator=(const RadixCache&) = delete;

    size_t page_size() const { return page_size_; }
    size_t grid() const { return grid_; }
    size_t last_grid_before(size_t len) const { return len == 0 ? 0 : (len - 1) / grid_ * grid_; }
    NodeRef root() const { return ref(root_index); }

    // touch = false: a look that refreshes nothing and counts no query.
    PrefixMatch match_prefix(std::span<const Token> tokens, bool touch = true);

    // pages: pages_for(tokens.size()) pages; checkpoints: strictly increasing grid positions <= tokens.size().
    // Bad arguments throw InvalidArgument before anything changes.
    InsertResult insert(std::span<const Token> tokens, std::span<PageId> pages, std::span<const Checkpoint> checkpoints,
                        PageRefs refs = PageRefs::consume);

    void lock(NodeRef node);
    void unlock(NodeRef node);
    void lock_state(NodeRef node);
    void unlock_state(NodeRef node);

    EvictResult evict_kv(size_t pages);          // until at least `pages` are freed or nothing is evictable
    EvictResult evict_checkpoints(size_t slots);  // until at least `slots` are freed or nothing is evictable
    void clear();                                 // drop everything; throws InvalidArgument while locked

    size_t cached_pages() const { return cached_pages_; }
    size_t checkpoints() const { return checkpoints_; }
    size_t evictable_pages() const { return evictable_pages_; }  // on nodes with no lock in their subtree
    size_t evictable_checkpoints() const { return state_lru_.size(); }
    size_t nodes() const { return nodes_ - 1; }  // without the root
    size_t tombstones() const { return tombstones_; }
    const PrefixCacheStats& stats() const { return stats_; }

    // Structure (links, page-aligned edges, the child index), no tombstone leaf, tombstones fork, checkpoints
    // on the grid, lock counts, LRU membership and order keys, the size counters, and the pools: every
    // tree page and slot allocated, each on one node; with `outside`, every reference and slot accounted
    // for exactly. Throws InvariantViolation naming the rule and the node.
    void check_invariants() const;
    void check_invariants(const OutsideHolds& outside) const;

private:
    static constexpr uint32_t none = UINT32_MAX;
    static constexpr uint32_t root_index = 0;
    struct Node {
        uint32_t parent = none;
        uint32_t first_child = none;
        uint32_t next = none;  // siblings
        uint32_t prev = none;
        uint32_t children = 0;
        uint32_t generation = 0;
        bool in_use = false;
        bool in_kv_lru = false;
        bool in_state_lru = false;
        size_t start = 0;  // position of the edge's first token
        std::vector<Token> tokens;
        std::vector<PageId> pages;
        SlotId slot = no_slot;
        uint32_t pins = 0;         // lock() on this node
        uint32_t state_locks = 0;  // lock_state() on this node
        uint32_t hold = 0;         // pins + state_locks over the subtree
        uint64_t tick = 0;         // last use
        uint64_t key = 0;          // hash of the edge's first page
        size_t end() const { return start + tokens.size(); }
    };
    using Lru = std::set<std::pair<uint64_t, uint32_t>>;

    NodeRef ref(uint32_t index) const { return {index, slab_[index].generation}; }
    uint32_t resolve(NodeRef node, const char* what) const;
    uint64_t page_key(const Token* first) const;
    uint64_t child_key(uint32_t parent, uint64_t key) const;
    uint32_t find_child(uint32_t parent, const Token* first) const;
    uint32_t new_node(uint32_t parent, size_t start, std::span<const Token> tokens, std::span<const PageId> pages);
    void link(uint32_t parent, uint32_t child);
    void unlink(uint32_t child);
    void refresh(uint32_t index);
    void touch(uint32_t index);
    void add_hold(uint32_t index, int delta);
    void change_lock(NodeRef node, uint32_t Node::*count, int delta, const char* what);
    uint32_t split(uint32_t index, size_t tokens);
    void merge_into_child(uint32_t index);
    void free_node(uint32_t index);
    void tidy(uint32_t index, EvictResult& r);
    void remove_leaf(uint32_t index, EvictResult& r);
    void drop_checkpoint(uint32_t index, EvictResult& r);
    void set_slot(uint32_t index, SlotId slot);
    void check(const OutsideHolds* outside) const;

    KvPagePool& kv_;
    StateSlotPool& state_;
    size_t page_size_;
    size_t grid_;
    size_t max_per_path_;
    std::vector<Node> slab_;
    std::vector<uint32_t> free_nodes_;
    std::unordered_multimap<uint64_t, uint32_t> child_index_;
    std::vector<uint32_t> slot_owner_;  // by slot id: the node holding it
    std::vector<uint32_t> page_mark_;   // by page id: the insert() that last saw it (duplicate check)
    uint32_t mark_epoch_ = 0;
    Lru kv_lru_;     // unlocked leaves
    Lru state_lru_;  // checkpoints without a lock on their node
    uint64_t clock_ = 0;
    size_t nodes_ = 0;
    size_t cached_pages_ = 0;
    size_t checkpoints_ = 0;
    size_t evictable_pages_ = 0;
    size_t tombstones_ = 0;
    PrefixCacheStats stats_;
};

}  // namespace kiln::serving::memory
