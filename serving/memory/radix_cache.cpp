#include "serving/memory/radix_cache.hpp"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"

namespace kiln::serving::memory {

namespace {

[[noreturn]] void violation(const std::string& what) { throw InvariantViolation("radix cache invariant: " + what); }

uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

size_t common_tokens(const Token* a, const Token* b, size_t n) {
    return static_cast<size_t>(std::mismatch(a, a + n, b).first - a);
}

}  // namespace

RadixCache::RadixCache(KvPagePool& kv, StateSlotPool& state, RadixCacheConfig config)
    : kv_(kv), state_(state), page_size_(kv.page_size()), max_per_path_(config.max_checkpoints_per_path) {
    if (config.chunk == 0) throw InvalidArgument("radix cache: the chunk length must be positive");
    grid_ = std::lcm(config.chunk, page_size_);
    slot_owner_.assign(state_.capacity(), none);
    page_mark_.assign(kv_.capacity(), 0);
    slab_.emplace_back();
    slab_[root_index].in_use = true;
    nodes_ = 1;
}

uint32_t RadixCache::resolve(NodeRef node, const char* what) const {
    if (node.index >= slab_.size() || !slab_[node.index].in_use || slab_[node.index].generation != node.generation)
        throw InvalidArgument(fmt::format("radix cache: {}: stale node reference {}", what, node.index));
    return node.index;
}

uint64_t RadixCache::page_key(const Token* first) const {
    uint64_t h = 0x51ed27f1a3c9b5d7ULL;
    for (size_t i = 0; i < page_size_; ++i) h = mix(h, static_cast<uint32_t>(first[i]));
    return h;
}

uint64_t RadixCache::child_key(uint32_t parent, uint64_t key) const { return mix(key, parent); }

uint32_t RadixCache::find_child(uint32_t parent, const Token* first) const {
    const uint64_t key = page_key(first);
    auto [lo, hi] = child_index_.equal_range(child_key(parent, key));
    for (auto it = lo; it != hi; ++it) {
        const Node& c = slab_[it->second];
        if (c.parent == parent && c.key == key && std::equal(first, first + page_size_, c.tokens.data())) return it->second;
    }
    return none;
}

uint32_t RadixCache::new_node(uint32_t parent, size_t start, std::span<const Token> tokens, std::span<const PageId> pages) {
    uint32_t index;
    if (!free_nodes_.empty()) {
        index = free_nodes_.back();
        free_nodes_.pop_back();
    } else {
        index = static_cast<uint32_t>(slab_.size());
        slab_.emplace_back();
    }
    Node& n = slab_[index];
    const uint32_t generation = n.generation;
    n = Node{};
    n.generation = generation;
    n.in_use = true;
    n.start = start;
    n.tokens.assign(tokens.begin(), tokens.end());
    n.pages.assign(pages.begin(), pages.end());
    n.key = page_key(n.tokens.data());
    n.tick = ++clock_;
    ++nodes_;
    ++tombstones_;
    cached_pages_ += n.pages.size();
    evictable_pages_ += n.pages.size();
    link(parent, index);
    refresh(index);
    return index;
}

void RadixCache::link(uint32_t parent, uint32_t child) {
    Node& c = slab_[child];
    Node& p = slab_[parent];
    c.parent = parent;
    c.prev = none;
    c.next = p.first_child;
    if (p.first_child != none) slab_[p.first_child].prev = child;
    p.first_child = child;
    ++p.children;
    child_index_.emplace(child_key(parent, c.key), child);
    refresh(parent);
}

void RadixCache::unlink(uint32_t child) {
    Node& c = slab_[child];
    Node& p = slab_[c.parent];
    auto [lo, hi] = child_index_.equal_range(child_key(c.parent, c.key));
    for (auto it = lo; it != hi; ++it)
        if (it->second == child) {
            child_index_.erase(it);
            break;
        }
    if (c.prev != none) slab_[c.prev].next = c.next;
    else p.first_child = c.next;
    if (c.next != none) slab_[c.next].prev = c.prev;
    --p.children;
    const uint32_t parent = c.parent;
    c.parent = c.next = c.prev = none;
    refresh(parent);
}

void RadixCache::refresh(uint32_t index) {
    Node& n = slab_[index];
    const bool kv = index != root_index && n.children == 0 && n.hold == 0;
    const bool st = n.slot != no_slot && n.state_locks == 0 && n.pins == 0;
    if (kv != n.in_kv_lru) {
        if (kv) kv_lru_.emplace(n.tick, index);
        else kv_lru_.erase({n.tick, index});
        n.in_kv_lru = kv;
    }
    if (st != n.in_state_lru) {
        if (st) state_lru_.emplace(n.tick, index);
        else state_lru_.erase({n.tick, index});
        n.in_state_lru = st;
    }
}

void RadixCache::touch(uint32_t index) {
    if (index == root_index) return;
    Node& n = slab_[index];
    if (n.in_kv_lru) kv_lru_.erase({n.tick, index});
    if (n.in_state_lru) state_lru_.erase({n.tick, index});
    n.in_kv_lru = n.in_state_lru = false;
    n.tick = ++clock_;
    refresh(index);
}

void RadixCache::add_hold(uint32_t index, int delta) {
    for (uint32_t i = index; i != none; i = slab_[i].parent) {
        Node& n = slab_[i];
        const bool was_free = n.hold == 0;
        n.hold = static_cast<uint32_t>(static_cast<int64_t>(n.hold) + delta);
        if (i != root_index) {
            if (was_free && n.hold != 0) evictable_pages_ -= n.pages.size();
            if (!was_free && n.hold == 0) evictable_pages_ += n.pages.size();
        }
        refresh(i);
    }
}

void RadixCache::set_slot(uint32_t index, SlotId slot) {
    Node& n = slab_[index];
    if (n.slot != no_slot) {
        slot_owner_[n.slot] = none;
        --checkpoints_;
        ++tombstones_;
    }
    n.slot = slot;
    if (slot != no_slot) {
        slot_owner_[slot] = index;
        ++checkpoints_;
        --tombstones_;
    }
    refresh(index);
}

// Splits node `index` after `tokens` tokens; the node keeps the lower part (its identity, children,
// checkpoint and locks) and a new parent takes the upper part. Returns the new parent.
uint32_t RadixCache::split(uint32_t index, size_t tokens) {
    const uint32_t parent = slab_[index].parent;
    unlink(index);
    Node& n = slab_[index];
    const auto t = static_cast<std::ptrdiff_t>(tokens);
    const auto p = static_cast<std::ptrdiff_t>(tokens / page_size_);
    const std::vector<Token> upper_tokens(n.tokens.begin(), n.tokens.begin() + t);
    const std::vector<PageId> upper_pages(n.pages.begin(), n.pages.begin() + p);
    const size_t start = n.start;
    const uint64_t tick = n.tick;
    const uint32_t hold = n.hold;
    n.tokens.erase(n.tokens.begin(), n.tokens.begin() + t);
    n.pages.erase(n.pages.begin(), n.pages.begin() + p);
    n.start += tokens;
    n.key = page_key(n.tokens.data());
    // new_node() counts the upper pages again, as on an unheld node.
    cached_pages_ -= upper_pages.size();
    if (hold == 0) evictable_pages_ -= upper_pages.size();
    const uint32_t upper = new_node(parent, start, upper_tokens, upper_pages);
    link(upper, index);  // no longer a leaf: leaves the KV LRU under its new tick
    Node& u = slab_[upper];
    u.tick = tick;
    u.hold = hold;
    if (hold != 0) evictable_pages_ -= upper_pages.size();
    return upper;
}

// A tombstone with a single child is folded into that child, which keeps its identity.
void RadixCache::merge_into_child(uint32_t index) {
    const uint32_t child = slab_[index].first_child;
    const uint32_t parent = slab_[index].parent;
    unlink(child);
    unlink(index);
    Node& t = slab_[index];
    Node& c = slab_[child];
    c.tokens.insert(c.tokens.begin(), t.tokens.begin(), t.tokens.end());
    c.pages.insert(c.pages.begin(), t.pages.begin(), t.pages.end());
    c.start = t.start;
    c.key = t.key;
    free_node(index);
    link(parent, child);
}

// Returns an unlinked tombstone's entry to the slab; references to it go stale.
void RadixCache::free_node(uint32_t index) {
    Node& n = slab_[index];
    if (n.in_kv_lru) kv_lru_.erase({n.tick, index});
    if (n.in_state_lru) state_lru_.erase({n.tick, index});
    n.in_kv_lru = n.in_state_lru = false;
    n.tokens.clear();
    n.pages.clear();
    n.in_use = false;
    ++n.generation;
    free_nodes_.push_back(index);
    --nodes_;
    --tombstones_;
}

void RadixCache::tidy(uint32_t index, EvictResult& r) {
    if (index == root_index || slab_[index].slot != no_slot) return;
    if (slab_[index].children == 0) {
        if (slab_[index].hold != 0) violation(fmt::format("node {} is a held tombstone leaf", index));
        remove_leaf(index, r);
    } else if (slab_[index].children == 1) {
        merge_into_child(index);
    }
}

void RadixCache::remove_leaf(uint32_t index, EvictResult& r) {
    Node& n = slab_[index];
    const uint32_t parent = n.parent;
    const size_t freed = kv_.release(n.pages);
    r.pages_freed += freed;
    stats_.evicted_pages += freed;
    cached_pages_ -= n.pages.size();
    evictable_pages_ -= n.pages.size();
    if (n.slot != no_slot) {
        const SlotId slot = n.slot;
        set_slot(index, no_slot);
        state_.free(slot);
        ++r.slots_freed;
        ++stats_.evicted_checkpoints;
    }
    unlink(index);
    free_node(index);
    ++r.nodes_removed;
    tidy(parent, r);
}

void RadixCache::drop_checkpoint(uint32_t index, EvictResult& r) {
    if (slab_[index].children == 0) {
        remove_leaf(index, r);
        return;
    }
    const SlotId slot = slab_[index].slot;
    set_slot(index, no_slot);
    state_.free(slot);
    ++r.slots_freed;
    ++stats_.evicted_checkpoints;
    tidy(index, r);
}

PrefixMatch RadixCache::match_prefix(std::span<const Token> tokens, bool touch_hit) {
    PrefixMatch m;
    const size_t limit = tokens.empty() ? 0 : (tokens.size() - 1) / page_size_ * page_size_;
    uint32_t node = root_index, state_node = root_index, kv_node = root_index;
    size_t pos = 0;
    while (pos < limit) {
        const uint32_t c = find_child(node, tokens.data() + pos);
        if (c == none) break;
        const Node& n = slab_[c];
        const size_t avail = std::min(n.tokens.size(), limit - pos);
        const size_t same = common_tokens(n.tokens.data(), tokens.data() + pos, avail) / page_size_ * page_size_;
        m.pages.insert(m.pages.end(), n.pages.begin(), n.pages.begin() + static_cast<std::ptrdiff_t>(same / page_size_));
        pos += same;
        kv_node = c;
        if (same < n.tokens.size()) break;
        node = c;
        if (n.slot != no_slot) state_node = c;
    }
    m.kv_len = pos;
    m.state_len = state_node == root_index ? 0 : slab_[state_node].end();
    m.state_slot = slab_[state_node].slot;
    const size_t branch = m.kv_len / grid_ * grid_;
    m.branch_len = branch > m.state_len ? branch : 0;
    m.state_node = ref(state_node);
    m.kv_node = ref(kv_node);
    if (touch_hit) {
        touch(state_node);
        ++stats_.queries;
        stats_.query_tokens += tokens.size();
        stats_.hit_tokens += m.state_len;
        stats_.kv_hit_tokens += m.kv_len;
    }
    return m;
}

InsertResult RadixCache::insert(std::span<const Token> tokens, std::span<PageId> pages,
                                std::span<const Checkpoint> checkpoints, PageRefs refs) {
    if (pages.size() != kv_.pages_for(tokens.size()))
        throw InvalidArgument(fmt::format("radix cache insert: {} tokens need {} pages, got {}", tokens.size(),
                                          kv_.pages_for(tokens.size()), pages.size()));
    if (++mark_epoch_ == 0) {  // wrapped: forget every old mark
        std::fill(page_mark_.begin(), page_mark_.end(), 0);
        mark_epoch_ = 1;
    }
    for (PageId p : pages) {
        if (p >= kv_.capacity() || kv_.refcount(p) == 0)
            throw InvalidArgument(fmt::format("radix cache insert: page {} is not allocated", p));
        if (page_mark_[p] == mark_epoch_) throw InvalidArgument(fmt::format("radix cache insert: page {} is given twice", p));
        page_mark_[p] = mark_epoch_;
    }
    size_t prev = 0;
    std::unordered_set<SlotId> given;
    for (const Checkpoint& c : checkpoints) {
        if (c.pos == 0 || c.pos % grid_ != 0 || c.pos > tokens.size() || c.pos <= prev)
            throw InvalidArgument(fmt::format("radix cache insert: checkpoint at {} is not a strictly increasing "
                                              "multiple of the grid {} within the {} tokens", c.pos, grid_, tokens.size()));
        if (!state_.is_allocated(c.slot))
            throw InvalidArgument(fmt::format("radix cache insert: checkpoint slot {} is not allocated", c.slot));
        if (slot_owner_[c.slot] != none || !given.insert(c.slot).second)
            throw InvalidArgument(fmt::format("radix cache insert: checkpoint slot {} is already in the tree or given twice",
                                              c.slot));
        prev = c.pos;
    }

    InsertResult r;
    const size_t end = checkpoints.empty() ? 0 : checkpoints.back().pos;
    std::vector<uint32_t> path;
    uint32_t node = root_index;
    size_t pos = 0, ci = 0;
    auto place = [&](uint32_t index, SlotId slot) {
        if (slab_[index].slot == no_slot) {
            set_slot(index, slot);
            ++r.checkpoints_added;
        } else {
            state_.free(slot);
            ++r.checkpoints_duplicate;
        }
        touch(index);
    };
    while (pos < end) {
        const size_t stop = checkpoints[ci].pos;
        uint32_t c = find_child(node, tokens.data() + pos);
        if (c == none) {
            // The rest is new: one node per checkpoint.
            for (; pos < end; ++ci) {
                const size_t to = checkpoints[ci].pos;
                auto span_pages = pages.subspan(pos / page_size_, (to - pos) / page_size_);
                if (refs == PageRefs::keep) kv_.retain(span_pages);
                node = new_node(node, pos, tokens.subspan(pos, to - pos), span_pages);
                set_slot(node, checkpoints[ci].slot);
                ++r.checkpoints_added;
                r.new_tokens += to - pos;
                path.push_back(node);
                pos = to;
            }
            break;
        }
        const size_t avail = std::min(slab_[c].tokens.size(), stop - pos);
        const size_t same = common_tokens(slab_[c].tokens.data(), tokens.data() + pos, avail) / page_size_ * page_size_;
        if (same < slab_[c].tokens.size()) c = split(c, same);
        for (size_t j = 0; j < slab_[c].pages.size(); ++j) {
            PageId& mine = pages[pos / page_size_ + j];
            const PageId cached = slab_[c].pages[j];
            if (mine == cached) {
                if (refs == PageRefs::consume) kv_.release(mine);
                continue;
            }
            ++r.duplicate_pages;
            r.pages_freed += kv_.release(mine);
            if (refs == PageRefs::keep) {
                kv_.retain(cached);
                mine = cached;
            }
        }
        r.cached_tokens += same;
        pos += same;
        node = c;
        path.push_back(c);
        if (pos == stop) place(c, checkpoints[ci++].slot);
    }
    if (refs == PageRefs::consume)
        for (size_t j = end / page_size_; j < pages.size(); ++j) r.pages_freed += kv_.release(pages[j]);

    if (max_per_path_ != 0) {
        size_t count = 0;
        for (uint32_t i : path) count += slab_[i].slot != no_slot;
        std::vector<uint32_t> pruned;
        for (size_t k = 0; k + 1 < path.size() && count > max_per_path_; ++k) {
            const Node& n = slab_[path[k]];
            if (n.slot == no_slot || n.children >= 2 || n.pins != 0 || n.state_locks != 0) continue;
            const SlotId slot = n.slot;
            set_slot(path[k], no_slot);
            state_.free(slot);
            pruned.push_back(path[k]);
            --count;
        }
        EvictResult unused;
        for (uint32_t i : pruned) tidy(i, unused);  // a pruned node has one child: it merges into it
        r.checkpoints_pruned = pruned.size();
        stats_.pruned_checkpoints += pruned.size();
    }
    touch(node);
    r.length = end;
    r.tail = ref(node);
    stats_.inserted_tokens += r.new_tokens;
    stats_.duplicate_pages += r.duplicate_pages;
    return r;
}

// One lock taken (+1) or released (-1): `count` is the node's pins or state_locks. The root may be
// pinned; every other lock needs a checkpoint on the node.
void RadixCache::change_lock(NodeRef node, uint32_t Node::*count, int delta, const char* what) {
    const uint32_t i = resolve(node, what);
    Node& n = slab_[i];
    if (delta > 0 && n.slot == no_slot && !(i == root_index && count == &Node::pins))
        throw InvalidArgument(fmt::format("radix cache: {}: the node has no checkpoint (lock a match's state_node or "
                                          "an insert's tail)", what));
    if (delta < 0 && n.*count == 0) throw InvalidArgument(fmt::format("radix cache: {}: the node is not locked", what));
    n.*count += delta;
    add_hold(i, delta);
}

void RadixCache::lock(NodeRef node) { change_lock(node, &Node::pins, +1, "lock"); }
void RadixCache::unlock(NodeRef node) { change_lock(node, &Node::pins, -1, "unlock"); }
void RadixCache::lock_state(NodeRef node) { change_lock(node, &Node::state_locks, +1, "lock_state"); }
void RadixCache::unlock_state(NodeRef node) { change_lock(node, &Node::state_locks, -1, "unlock_state"); }

EvictResult RadixCache::evict_kv(size_t pages) {
    EvictResult r;
    while (r.pages_freed < pages && !kv_lru_.empty()) remove_leaf(kv_lru_.begin()->second, r);
    return r;
}

EvictResult RadixCache::evict_checkpoints(size_t slots) {
    EvictResult r;
    while (r.slots_freed < slots && !state_lru_.empty()) drop_checkpoint(state_lru_.begin()->second, r);
    return r;
}

void RadixCache::clear() {
    if (slab_[root_index].hold != 0) throw InvalidArgument("radix cache: clear: nodes are locked");
    EvictResult r;
    while (!kv_lru_.empty()) remove_leaf(kv_lru_.begin()->second, r);
}

void RadixCache::check_invariants() const { check(nullptr); }
void RadixCache::check_invariants(const OutsideHolds& outside) const { check(&outside); }

void RadixCache::check(const OutsideHolds* outside) const {
    const Node& root = slab_[root_index];
    if (!root.in_use || root.parent != none || !root.tokens.empty() || !root.pages.empty() || root.slot != no_slot ||
        root.state_locks != 0 || root.in_kv_lru || root.in_state_lru)
        violation("the root must be an empty node without checkpoint, parent or state lock");

    std::vector<uint32_t> tree_pages(kv_.capacity(), 0);  // by page id: nodes holding it
    std::vector<uint32_t> stack{root_index};
    std::vector<uint8_t> seen(slab_.size(), 0);
    size_t nodes = 0, pages = 0, checkpoints = 0, tombstones = 0, evictable = 0, kv_members = 0, state_members = 0;
    seen[root_index] = 1;
    while (!stack.empty()) {
        const uint32_t i = stack.back();
        stack.pop_back();
        const Node& n = slab_[i];
        ++nodes;
        // Children: links, the child index, distinct first pages, hold sums.
        uint32_t count = 0, prev = none;
        uint64_t held_below = 0;
        for (uint32_t c = n.first_child; c != none; c = slab_[c].next) {
            if (c >= slab_.size() || !slab_[c].in_use) violation(fmt::format("node {} links to a free node {}", i, c));
            if (seen[c]++) violation(fmt::format("node {} is reached twice (a cycle or a shared child)", c));
            const Node& ch = slab_[c];
            if (ch.parent != i || ch.prev != prev)
                violation(fmt::format("node {}: parent/sibling links disagree with node {}", c, i));
            if (ch.start != n.end())
                violation(fmt::format("node {} starts at {} but its parent {} ends at {}", c, ch.start, i, n.end()));
            if (ch.tokens.size() < page_size_ || find_child(i, ch.tokens.data()) != c)
                violation(fmt::format("node {} is not found under its parent {} by its first page", c, i));
            held_below += ch.hold;
            prev = c;
            ++count;
            stack.push_back(c);
        }
        if (count != n.children) violation(fmt::format("node {} counts {} children but links {}", i, n.children, count));
        if (n.hold != n.pins + n.state_locks + held_below)
            violation(fmt::format("node {}: hold {} != locks {} + {} + subtree {}", i, n.hold, n.pins, n.state_locks,
                                  held_below));
        if (n.state_locks != 0 && n.slot == no_slot) violation(fmt::format("node {} has a state lock but no checkpoint", i));
        if (i == root_index) continue;

        if (n.tokens.empty() || n.tokens.size() % page_size_ != 0 || n.start % page_size_ != 0 ||
            n.pages.size() != n.tokens.size() / page_size_)
            violation(fmt::format("node {}: edge [{}, {}) with {} pages is not page-aligned", i, n.start, n.end(),
                                  n.pages.size()));
        if (n.key != page_key(n.tokens.data())) violation(fmt::format("node {} has a stale first-page key", i));
        if (n.slot == no_slot) {
            ++tombstones;
            if (n.children == 0) violation(fmt::format("node {} is a tombstone leaf (KV without a checkpoint)", i));
            if (n.children == 1) violation(fmt::format("node {} is a tombstone with a single child (not merged)", i));
            if (n.pins != 0) violation(fmt::format("node {} is a locked tombstone", i));
        } else {
            ++checkpoints;
            if (n.end() % grid_ != 0)
                violation(fmt::format("node {} has a checkpoint at {}, off the grid {}", i, n.end(), grid_));
            if (n.slot >= slot_owner_.size() || slot_owner_[n.slot] != i)
                violation(fmt::format("node {}: slot {} is not recorded as its own", i, n.slot));
            if (!state_.is_allocated(n.slot)) violation(fmt::format("node {} holds slot {}, which is free", i, n.slot));
        }
        for (PageId p : n.pages) {
            if (p >= tree_pages.size()) violation(fmt::format("node {} holds page {}, out of range", i, p));
            if (tree_pages[p]++) violation(fmt::format("page {} is on two nodes of the tree", p));
        }
        pages += n.pages.size();
        if (n.hold == 0) evictable += n.pages.size();
        const bool kv = n.children == 0 && n.hold == 0;
        const bool st = n.slot != no_slot && n.state_locks == 0 && n.pins == 0;
        if (kv != n.in_kv_lru || (kv && !kv_lru_.count({n.tick, i})))
            violation(fmt::format("node {}: KV LRU membership is wrong (unlocked leaf: {})", i, kv));
        if (st != n.in_state_lru || (st && !state_lru_.count({n.tick, i})))
            violation(fmt::format("node {}: checkpoint LRU membership is wrong (unlocked checkpoint: {})", i, st));
        if (n.tick > clock_) violation(fmt::format("node {} was used in the future", i));
        kv_members += kv;
        state_members += st;
    }
    size_t in_use = 0;
    for (const Node& n : slab_) in_use += n.in_use;
    if (nodes != in_use || nodes != nodes_)
        violation(fmt::format("{} nodes reachable, {} in use, {} counted", nodes, in_use, nodes_));
    if (in_use + free_nodes_.size() != slab_.size()) violation("the free node list does not match the slab");
    if (child_index_.size() != nodes - 1) violation("the child index has entries for removed nodes");
    if (kv_members != kv_lru_.size() || state_members != state_lru_.size())
        violation(fmt::format("LRU sizes {} / {} but {} / {} members", kv_lru_.size(), state_lru_.size(), kv_members,
                              state_members));
    if (pages != cached_pages_) violation(fmt::format("{} pages on nodes, {} counted", pages, cached_pages_));
    if (checkpoints != checkpoints_) violation(fmt::format("{} checkpoints, {} counted", checkpoints, checkpoints_));
    if (tombstones != tombstones_) violation(fmt::format("{} tombstones, {} counted", tombstones, tombstones_));
    if (evictable != evictable_pages_)
        violation(fmt::format("{} evictable pages, {} counted", evictable, evictable_pages_));
    size_t owned = 0;
    for (uint32_t s = 0; s < slot_owner_.size(); ++s)
        if (slot_owner_[s] != none) {
            ++owned;
            if (slot_owner_[s] >= slab_.size() || !slab_[slot_owner_[s]].in_use || slab_[slot_owner_[s]].slot != s)
                violation(fmt::format("slot {} is recorded for node {}, which does not hold it", s, slot_owner_[s]));
        }
    if (owned != checkpoints) violation(fmt::format("{} slots recorded for {} checkpoints", owned, checkpoints));

    // Against the pools.
    std::vector<uint32_t> held(outside ? kv_.capacity() : 0, 0);
    if (outside)
        for (PageId p : outside->pages) {
            if (p >= held.size()) violation(fmt::format("page {} held outside the tree is out of range", p));
            ++held[p];
        }
    size_t pages_in_use = 0;
    for (PageId p = 0; p < tree_pages.size(); ++p) {
        const uint32_t refs = kv_.refcount(p);
        const uint32_t mine = tree_pages[p], theirs = outside ? held[p] : 0;
        pages_in_use += mine + theirs != 0;
        if (outside ? refs != mine + theirs : refs < mine)
            violation(fmt::format("page {} has {} references; the tree holds {} and callers {}", p, refs, mine,
                                  outside ? std::to_string(theirs) : std::string("some")));
    }
    if (!outside) return;
    if (pages_in_use != kv_.used())
        violation(fmt::format("{} KV pages allocated, {} accounted for by the tree and callers", kv_.used(), pages_in_use));
    std::unordered_set<SlotId> slots;
    for (SlotId s : outside->slots) {
        if (!slots.insert(s).second) violation(fmt::format("slot {} is held twice outside the tree", s));
        if (s < slot_owner_.size() && slot_owner_[s] != none)
            violation(fmt::format("slot {} is held outside the tree and by node {}", s, slot_owner_[s]));
        if (!state_.is_allocated(s)) violation(fmt::format("slot {} is held outside the tree but free", s));
    }
    if (state_.used() != checkpoints + slots.size())
        violation(fmt::format("{} state slots allocated, {} checkpoints + {} held outside", state_.used(), checkpoints,
                              slots.size()));
}

}  // namespace kiln::serving::memory
