// A long seeded random operation sequence on the radix cache over real pools, driven as the engine
// will drive it: admission (match, lock, copy-on-write, evict on shortfall, allocate), decode steps,
// donations of snapshots from running requests (PageRefs::keep), finishes (PageRefs::consume), aborts,
// evictions and plain lookups. Every page and slot is stamped with the hash of the token prefix it
// represents, so each match is checked to return exactly the KV and state of its own prefix; the
// invariant checker accounts for every reference after every operation.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "runtime/unified_pool.hpp"
#include "serving/memory/radix_cache.hpp"

using namespace kiln::serving::memory;
using kiln::runtime::BlockKind;
using kiln::runtime::UnifiedPool;
using kiln::runtime::UnifiedPoolConfig;

namespace {

uint64_t extend(uint64_t h, Token t) {
    h ^= static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
}

struct Setup {
    size_t page_size;
    size_t cap;
    bool unified;
    size_t max_len;
    size_t ops;
};

struct Request {
    size_t prompt_len = 0;
    std::vector<Token> tokens;
    std::vector<uint64_t> prefix;  // prefix[i]: hash of tokens[0, i)
    std::vector<PageId> pages;     // one reference each
    SlotId working = no_slot;
    std::vector<Checkpoint> snapshots;  // taken, not yet donated
    NodeRef lock;
};

class Harness {
public:
    explicit Harness(const Setup& s, uint64_t seed) : s_(s), rng_(seed) {
        if (s.unified) {
            UnifiedPoolConfig c;
            c.kv_block_bytes = 64;
            c.state_block_bytes = 64 * 64;  // a state costs 64 pages
            c.arena_bytes = 64 * 6000 / s.page_size;
            c.max_state_blocks = 40;
            c.alignment = 64;
            arena_ = std::make_unique<UnifiedPool>(c);
            kv_.emplace(std::make_unique<UnifiedBlockAllocator>(*arena_, BlockKind::kv), s.page_size);
            state_.emplace(std::make_unique<UnifiedBlockAllocator>(*arena_, BlockKind::state));
        } else {
            kv_.emplace(std::make_unique<FixedBlockAllocator>(6000 / s.page_size), s.page_size);
            state_.emplace(std::make_unique<FixedBlockAllocator>(40));
        }
        RadixCacheConfig cfg;
        cfg.max_checkpoints_per_path = s.cap;
        tree_.emplace(*kv_, *state_, cfg);
        page_stamp_.assign(kv_->capacity(), 0);
        slot_stamp_.assign(state_->capacity(), 0);
        ps_ = s.page_size;
        grid_ = tree_->grid();
    }

    void run() {
        for (size_t op = 0; op < s_.ops; ++op) {
            const double r = unit();
            if (r < 0.30) admit();
            else if (r < 0.50) decode();
            else if (r < 0.60) donate();
            else if (r < 0.80) finish();
            else if (r < 0.84) abort_one();
            else if (r < 0.89) evict_kv();
            else if (r < 0.93) evict_checkpoints();
            else lookup();
            if (arena_ && unit() < 0.3) arena_->take_moves();
            check();
        }
        while (!running_.empty()) abort(running_.size() - 1);
        check();
        tree_->clear();
        check();
        CHECK(kv_->used() == 0);
        CHECK(state_->used() == 0);

        MESSAGE("admitted " << admitted_ << ", state hits " << hits_ << ", exact-repeat hits " << repeat_hits_
                            << ", branch points " << branches_ << ", duplicate pages " << tree_->stats().duplicate_pages
                            << ", rejected " << rejected_ << ", preempted " << preempted_ << ", max tombstones "
                            << max_tombstones_ << ", pruned " << tree_->stats().pruned_checkpoints << ", byte shortfalls "
                            << byte_shortfalls_);
        CHECK(hits_ > s_.ops / 50);
        CHECK(repeat_hits_ > 10);
        CHECK(branches_ > 10);
        CHECK(tree_->stats().duplicate_pages > 100);
        CHECK(max_tombstones_ > 2);
        CHECK(tree_->stats().evicted_pages > 100);
        CHECK(tree_->stats().evicted_checkpoints > 10);
        if (s_.cap) CHECK(tree_->stats().pruned_checkpoints > 10);
        if (arena_) CHECK(byte_shortfalls_ > 10);
    }

private:
    double unit() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
    size_t below(size_t n) { return n == 0 ? 0 : rng_() % n; }
    Token token() { return static_cast<Token>(rng_() % 6); }  // a small vocabulary: accidental sharing

    std::vector<Token> new_prompt() {
        const double r = unit();
        std::vector<Token> t;
        if (!history_.empty() && r < 0.25) {
            t = history_[below(history_.size())].first;  // an exact repeat of a prompt
        } else if (!history_.empty() && r < 0.55) {
            t = history_[below(history_.size())].second;  // the next turn of a conversation
            for (size_t n = 1 + below(150); n; --n) t.push_back(token());
        } else if (!history_.empty() && r < 0.80) {
            const auto& h = history_[below(history_.size())].second;
            t.assign(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(below(h.size()) + 1));
            for (size_t n = 1 + below(100); n; --n) t.push_back(token());
        } else {
            for (size_t n = 2 + below(s_.max_len / 2); n; --n) t.push_back(token());
        }
        if (t.size() > s_.max_len) t.resize(s_.max_len);
        return t;
    }

    static std::vector<uint64_t> prefix_hashes(const std::vector<Token>& t) {
        std::vector<uint64_t> h(t.size() + 1, 0x243f6a8885a308d3ULL);
        for (size_t i = 0; i < t.size(); ++i) h[i + 1] = extend(h[i], t[i]);
        return h;
    }

    // The result must be exactly this prefix's KV and state.
    void verify(const PrefixMatch& m, const std::vector<Token>& t, const std::vector<uint64_t>& h) {
        REQUIRE(m.kv_len < t.size());
        REQUIRE(m.kv_len % ps_ == 0);
        REQUIRE(m.pages.size() == m.kv_len / ps_);
        REQUIRE(m.state_len <= m.kv_len);
        REQUIRE(m.state_len % grid_ == 0);
        REQUIRE((m.state_len == 0) == (m.state_slot == no_slot));
        if (m.branch_len) {
            REQUIRE(m.branch_len % grid_ == 0);
            REQUIRE(m.branch_len > m.state_len);
            REQUIRE(m.branch_len <= m.kv_len);
            REQUIRE(m.kv_len - m.branch_len < grid_);
        } else {
            REQUIRE(m.kv_len / grid_ * grid_ <= m.state_len);
        }
        for (size_t i = 0; i < m.pages.size(); ++i)
            if (page_stamp_[m.pages[i]] != h[(i + 1) * ps_]) FAIL("page " << i << " of a match holds another prefix's KV");
        if (m.state_slot != no_slot && slot_stamp_[m.state_slot] != h[m.state_len])
            FAIL("the checkpoint at " << m.state_len << " holds another prefix's state");
    }

    // Frees memory until `slots` slots and `pages` pages fit together; false when it cannot.
    bool make_room(size_t slots, size_t pages) {
        for (int attempt = 0; attempt < 4; ++attempt) {
            const Shortfall sf = shortfall(state_->blocks(), slots, kv_->blocks(), pages);
            if (sf.ok()) return true;
            if (sf.state_ids) tree_->evict_checkpoints(sf.state_ids);
            if (sf.kv_ids) tree_->evict_kv(sf.kv_ids);
            if (sf.bytes) {
                ++byte_shortfalls_;
                if (unit() < 0.7) tree_->evict_kv(sf.kv_blocks_for_bytes);
                else tree_->evict_checkpoints(sf.state_blocks_for_bytes);
            }
        }
        return shortfall(state_->blocks(), slots, kv_->blocks(), pages).ok();
    }

    // Computes tokens [from, to) of a request: KV pages as they fill, then the working state.
    void compute(Request& q, size_t from, size_t to) {
        for (size_t end = (from / ps_ + 1) * ps_; end <= to; end += ps_) page_stamp_[q.pages[end / ps_ - 1]] = q.prefix[end];
        slot_stamp_[q.working] = q.prefix[to];
    }

    void admit() {
        Request q;
        q.tokens = new_prompt();
        q.prompt_len = q.tokens.size();
        q.prefix = prefix_hashes(q.tokens);
        const size_t len = q.tokens.size();
        const PrefixMatch m = tree_->match_prefix(q.tokens);
        verify(m, q.tokens, q.prefix);
        const bool repeat = std::any_of(history_.begin(), history_.end(), [&](const auto& h) { return h.first == q.tokens; });
        const size_t resume = m.state_len;

        // Locked before anything is evicted for room.
        tree_->lock(m.state_node);
        if (resume) tree_->lock_state(m.state_node);
        std::vector<size_t> at;
        if (m.branch_len) at.push_back(m.branch_len);
        for (size_t p = (resume / grid_ + 1) * grid_; p < len; p += grid_)
            if (p != m.branch_len && (p == tree_->last_grid_before(len) || unit() < 0.3)) at.push_back(p);
        std::sort(at.begin(), at.end());
        const size_t new_pages = kv_->pages_for(len) - resume / ps_;
        if (!make_room(1 + at.size(), new_pages)) {
            at.clear();  // snapshots are optional
            if (!make_room(1, new_pages)) {
                if (resume) tree_->unlock_state(m.state_node);
                tree_->unlock(m.state_node);
                ++rejected_;
                return;
            }
        }
        q.pages.assign(m.pages.begin(), m.pages.begin() + static_cast<std::ptrdiff_t>(resume / ps_));
        kv_->retain(q.pages);
        REQUIRE(kv_->allocate(new_pages, q.pages));
        std::vector<SlotId> slots;
        REQUIRE(state_->allocate(1 + at.size(), slots));
        q.working = slots[0];
        slot_stamp_[q.working] = resume ? slot_stamp_[m.state_slot] : q.prefix[0];  // copy-on-write or zero state
        if (resume) tree_->unlock_state(m.state_node);
        for (size_t i = 0; i < at.size(); ++i) {
            q.snapshots.push_back({at[i], slots[1 + i]});
            slot_stamp_[slots[1 + i]] = q.prefix[at[i]];
        }
        compute(q, resume, len);
        q.lock = m.state_node;
        running_.push_back(std::move(q));
        ++admitted_;
        hits_ += resume > 0;
        repeat_hits_ += repeat && resume > 0;
        branches_ += m.branch_len > 0;
    }

    void decode() {
        if (running_.empty()) return;
        const size_t i = below(running_.size());
        Request& q = running_[i];
        const size_t n = 1 + below(2 * grid_);
        if (q.tokens.size() + n > s_.max_len + 200) return;
        const size_t from = q.tokens.size(), to = from + n;
        const size_t more = kv_->pages_for(to) - q.pages.size();
        const size_t track = (to / grid_) * grid_;
        const bool snapshot = track > from && unit() < 0.5;
        if (!make_room(snapshot, more) && !make_room(0, more)) {  // no room even without the snapshot
            ++preempted_;
            abort(i);
            return;
        }
        for (size_t k = 0; k < n; ++k) {
            q.tokens.push_back(token());
            q.prefix.push_back(extend(q.prefix.back(), q.tokens.back()));
        }
        REQUIRE(kv_->allocate(more, q.pages));
        std::vector<SlotId> s;
        if (snapshot && state_->allocate(1, s)) {
            q.snapshots.push_back({track, s[0]});
            slot_stamp_[s[0]] = q.prefix[track];
        }
        compute(q, from, to);
    }

    // A running request hands its snapshots to the tree and goes on with the tree's pages.
    void donate() {
        std::vector<size_t> with;
        for (size_t i = 0; i < running_.size(); ++i)
            if (!running_[i].snapshots.empty()) with.push_back(i);
        if (with.empty()) return;
        Request& q = running_[with[below(with.size())]];
        const size_t len = q.tokens.size();
        const std::vector<Token> prefix_tokens(q.tokens.begin(), q.tokens.begin() + static_cast<std::ptrdiff_t>(len));
        const InsertResult r = tree_->insert(prefix_tokens, q.pages, q.snapshots, PageRefs::keep);
        REQUIRE(r.length == q.snapshots.back().pos);
        for (size_t i = 0; i < r.length / ps_; ++i)
            if (page_stamp_[q.pages[i]] != q.prefix[(i + 1) * ps_]) FAIL("a swapped-in page holds another prefix's KV");
        q.snapshots.clear();
        tree_->lock(r.tail);
        tree_->unlock(q.lock);
        q.lock = r.tail;
        after_insert(q.tokens, q.prefix, r);
    }

    void finish() {
        if (running_.empty()) return;
        const size_t i = below(running_.size());
        Request& q = running_[i];
        const InsertResult r = tree_->insert(q.tokens, q.pages, q.snapshots, PageRefs::consume);
        tree_->unlock(q.lock);
        state_->free(q.working);
        after_insert(q.tokens, q.prefix, r);
        history_.emplace_back(std::vector<Token>(q.tokens.begin(), q.tokens.begin() + static_cast<std::ptrdiff_t>(q.prompt_len)),
                              q.tokens);
        if (history_.size() > 40) history_.erase(history_.begin());
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    // Right after an insert its tail's checkpoint is there for the next request on the path.
    void after_insert(const std::vector<Token>& t, const std::vector<uint64_t>& h, const InsertResult& r) {
        max_tombstones_ = std::max(max_tombstones_, tree_->tombstones());
        if (r.length == 0) return;
        std::vector<Token> next(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(r.length));
        next.push_back(0);
        const PrefixMatch m = tree_->match_prefix(next, false);
        REQUIRE(m.state_len == r.length);
        REQUIRE(m.state_slot != no_slot);
        std::vector<uint64_t> hn(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(r.length + 1));
        hn.push_back(extend(hn.back(), 0));
        verify(m, next, hn);
    }

    void abort(size_t i) {
        Request& q = running_[i];
        kv_->release(q.pages);
        state_->free(q.working);
        for (const Checkpoint& c : q.snapshots) state_->free(c.slot);
        tree_->unlock(q.lock);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    void abort_one() {
        if (!running_.empty()) abort(below(running_.size()));
    }

    // Every evictable page has no other reference here, so eviction must free what it counts.
    void evict_kv() {
        const size_t want = 1 + below(200), evictable = tree_->evictable_pages();
        const EvictResult e = tree_->evict_kv(want);
        REQUIRE(e.pages_freed >= std::min(want, evictable));
        if (e.pages_freed < want) REQUIRE(tree_->evictable_pages() == 0);
    }

    void evict_checkpoints() {
        const size_t want = 1 + below(8), evictable = tree_->evictable_checkpoints();
        const EvictResult e = tree_->evict_checkpoints(want);
        REQUIRE(e.slots_freed >= std::min(want, evictable));
        if (e.slots_freed < want) REQUIRE(tree_->evictable_checkpoints() == 0);
    }

    void lookup() {
        const std::vector<Token> t = new_prompt();
        verify(tree_->match_prefix(t, unit() < 0.5), t, prefix_hashes(t));
    }

    void check() {
        OutsideHolds held;
        for (const Request& q : running_) {
            held.pages.insert(held.pages.end(), q.pages.begin(), q.pages.end());
            held.slots.push_back(q.working);
            for (const Checkpoint& c : q.snapshots) held.slots.push_back(c.slot);
        }
        tree_->check_invariants(held);
        kv_->check_invariants();
        state_->check_invariants();
    }

    Setup s_;
    std::mt19937_64 rng_;
    std::unique_ptr<UnifiedPool> arena_;
    std::optional<KvPagePool> kv_;
    std::optional<StateSlotPool> state_;
    std::optional<RadixCache> tree_;
    size_t ps_ = 1, grid_ = 64;
    std::vector<uint64_t> page_stamp_, slot_stamp_;
    std::vector<Request> running_;
    std::vector<std::pair<std::vector<Token>, std::vector<Token>>> history_;  // prompt, whole sequence
    size_t admitted_ = 0, hits_ = 0, repeat_hits_ = 0, branches_ = 0, rejected_ = 0, preempted_ = 0;
    size_t max_tombstones_ = 0, byte_shortfalls_ = 0;
};

}  // namespace

TEST_CASE("radix cache random: page size 1, split pools") {
    Harness({1, 0, false, 500, 10000}, 1).run();
}

TEST_CASE("radix cache random: page size 16, split pools, at most 3 checkpoints per path") {
    Harness({16, 3, false, 1200, 10000}, 2).run();
}

TEST_CASE("radix cache random: page size 4, both pools on one unified pool") {
    Harness({4, 0, true, 800, 10000}, 3).run();
}
