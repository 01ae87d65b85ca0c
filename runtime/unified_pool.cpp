#include "runtime/unified_pool.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"

namespace kiln::runtime {

namespace {

[[noreturn]] void violation(const std::string& what) {
    throw InvariantViolation("unified pool invariant: " + what);
}

size_t ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

}  // namespace

const char* to_string(BlockKind kind) { return kind == BlockKind::state ? "state" : "kv"; }

UnifiedPool::UnifiedPool(const UnifiedPoolConfig& config) : cfg_(config) {
    if (cfg_.alignment == 0) throw InvalidArgument("unified pool: alignment must be positive");
    for (auto [name, bytes] : {std::pair{"state", cfg_.state_block_bytes}, std::pair{"kv", cfg_.kv_block_bytes}}) {
        if (bytes == 0 || bytes % cfg_.alignment != 0)
            throw InvalidArgument(fmt::format("unified pool: {} block size {} must be a positive multiple of the "
                                              "alignment {}", name, bytes, cfg_.alignment));
        if (bytes > cfg_.arena_bytes)
            throw InvalidArgument(fmt::format("unified pool: a {} block ({} bytes) does not fit in the arena ({} bytes)",
                                              name, bytes, cfg_.arena_bytes));
    }
    const size_t state_slots = cfg_.arena_bytes / cfg_.state_block_bytes;
    const size_t kv_slots = cfg_.arena_bytes / cfg_.kv_block_bytes;
    constexpr size_t id_limit = std::numeric_limits<uint32_t>::max();
    if (state_slots >= id_limit || kv_slots >= id_limit || cfg_.max_state_blocks >= id_limit ||
        cfg_.max_kv_blocks >= id_limit)
        throw InvalidArgument("unified pool: more than 2^32 - 1 blocks of one kind");
    const size_t state_ids = cfg_.max_state_blocks ? cfg_.max_state_blocks : state_slots;
    const size_t kv_ids = cfg_.max_kv_blocks ? cfg_.max_kv_blocks : kv_slots;

    state_.block_bytes = cfg_.state_block_bytes;
    kv_.block_bytes = cfg_.kv_block_bytes;
    state_.blocks.resize(state_ids);
    kv_.blocks.resize(kv_ids);
    state_.at.assign(state_slots, no_id);
    kv_.at.assign(kv_slots, no_id);
    // Lowest ids are handed out first.
    for (Side* s : {&state_, &kv_}) {
        s->free_ids.resize(s->blocks.size());
        for (size_t i = 0; i < s->free_ids.size(); ++i) s->free_ids[i] = static_cast<uint32_t>(s->free_ids.size() - 1 - i);
    }
    kv_slots_ = static_cast<uint32_t>(kv_slots);
    kv_low_ = kv_slots_;
}

const UnifiedPool::Block& UnifiedPool::live_block(BlockKind kind, uint32_t id) const {
    const Side& s = side(kind);
    if (id >= s.blocks.size() || !s.blocks[id].live)
        throw InvalidArgument(fmt::format("unified pool: {} block {} is not allocated", to_string(kind), id));
    return s.blocks[id];
}

bool UnifiedPool::is_live(BlockKind kind, uint32_t id) const {
    const Side& s = side(kind);
    return id < s.blocks.size() && s.blocks[id].live;
}

uint32_t UnifiedPool::index(BlockKind kind, uint32_t id) const { return live_block(kind, id).index; }

void UnifiedPool::place(Side& s, uint32_t id, uint32_t index) {
    Block& b = s.blocks[id];
    b.index = index;
    b.device_index = index;
    b.live = true;
    b.has_content = false;
    s.at[index] = id;
    s.fresh.push_back(id);
    ++s.live;
}

bool UnifiedPool::allocate(BlockKind kind, size_t n, std::vector<uint32_t>& out) {
    if (n == 0) return true;
    if (!shortfall(kind == BlockKind::state ? n : 0, kind == BlockKind::kv ? n : 0).ok()) {
        ++counters_.failed_allocations;
        return false;
    }
    Side& s = side(kind);
    out.reserve(out.size() + n);
    for (size_t i = 0; i < n; ++i) {
        const uint32_t id = s.free_ids.back();
        s.free_ids.pop_back();
        const uint32_t index = kind == BlockKind::state ? static_cast<uint32_t>(s.live) : --kv_low_;
        place(s, id, index);
        out.push_back(id);
    }
    counters_.allocations += n;
    return true;
}

void UnifiedPool::move_into_hole(Side& s, uint32_t from, uint32_t hole) {
    const uint32_t id = s.at[from];
    Block& b = s.blocks[id];
    b.index = hole;
    s.at[hole] = id;
    s.at[from] = no_id;
    if (b.has_content && !b.dirty) {
        b.dirty = true;
        s.moved.push_back(id);
    }
}

void UnifiedPool::free(BlockKind kind, uint32_t id) {
    live_block(kind, id);
    Side& s = side(kind);
    Block& b = s.blocks[id];
    const uint32_t hole = b.index;
    b.live = false;
    b.has_content = false;
    s.at[hole] = no_id;
    --s.live;
    s.free_ids.push_back(id);
    ++counters_.frees;
    // Keep the side hole-free: the frontier block moves into the hole.
    const uint32_t frontier = kind == BlockKind::state ? static_cast<uint32_t>(s.live) : kv_low_;
    if (hole != frontier) move_into_hole(s, frontier, hole);
    if (kind == BlockKind::kv) ++kv_low_;
}

Shortfall UnifiedPool::shortfall(size_t n_state, size_t n_kv) const {
    Shortfall r;
    r.state_ids = n_state > state_.free_ids.size() ? n_state - state_.free_ids.size() : 0;
    r.kv_ids = n_kv > kv_.free_ids.size() ? n_kv - kv_.free_ids.size() : 0;
    using wide = unsigned __int128;
    const wide need = (wide(state_.live) + n_state) * state_.block_bytes + wide(n_kv) * kv_.block_bytes;
    const wide have = kv_begin();
    if (need > have) {
        const wide missing = need - have;
        r.bytes = missing > std::numeric_limits<size_t>::max() ? std::numeric_limits<size_t>::max()
                                                               : static_cast<size_t>(missing);
        r.state_blocks_for_bytes = ceil_div(r.bytes, state_.block_bytes);
        r.kv_blocks_for_bytes = ceil_div(r.bytes, kv_.block_bytes);
    }
    return r;
}

size_t UnifiedPool::fits(BlockKind kind) const {
    const Side& s = side(kind);
    return std::min(s.free_ids.size(), gap_bytes() / s.block_bytes);
}

bool UnifiedPool::has_pending_moves() const {
    for (const Side* s : {&state_, &kv_})
        for (uint32_t id : s->moved) {
            const Block& b = s->blocks[id];
            if (b.live && b.has_content && b.device_index != b.index) return true;
        }
    return false;
}

std::vector<PoolMove> UnifiedPool::pending_moves() const {
    std::vector<PoolMove> out;
    for (BlockKind kind : {BlockKind::state, BlockKind::kv}) {
        const Side& s = side(kind);
        const size_t first = out.size();
        for (uint32_t id : s.moved) {
            const Block& b = s.blocks[id];
            if (!b.live || !b.has_content || b.device_index == b.index) continue;
            out.push_back({b.device_index * s.block_bytes, b.index * s.block_bytes, s.block_bytes, kind, id});
        }
        // Independent by construction: a block that left index h was the frontier then, so any block that
        // later moves into h was allocated since, has no contents and needs no move.
        std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                  [](const PoolMove& a, const PoolMove& b) { return a.dst < b.dst; });
    }
    return out;
}

void UnifiedPool::acknowledge_moves() {
    for (Side* s : {&state_, &kv_}) {
        for (uint32_t id : s->moved) {
            Block& b = s->blocks[id];
            b.dirty = false;
            if (b.live && b.has_content && b.device_index != b.index) {
                ++counters_.moves;
                counters_.moved_bytes += s->block_bytes;
                b.device_index = b.index;
            }
        }
        s->moved.clear();
        for (uint32_t id : s->fresh) {
            Block& b = s->blocks[id];
            if (!b.live) continue;
            b.has_content = true;
            b.device_index = b.index;
        }
        s->fresh.clear();
    }
}

std::vector<PoolMove> UnifiedPool::take_moves() {
    std::vector<PoolMove> moves = pending_moves();
    acknowledge_moves();
    return moves;
}

// Checks one side whose span is the indices [first, last); returns the byte range that its blocks'
// contents occupy (where they were at the last acknowledgement), empty as {arena, 0}.
std::pair<size_t, size_t> UnifiedPool::check_side(BlockKind kind, uint32_t first, uint32_t last) const {
    const Side& s = side(kind);
    const char* name = to_string(kind);
    if (first > last || last > s.at.size()) violation(fmt::format("{} span [{}, {}) is out of range", name, first, last));

    enum : uint8_t { listed_free = 1, listed_moved = 2, listed_fresh = 4 };
    std::vector<uint8_t> flags(s.blocks.size(), 0);
    for (uint32_t id : s.free_ids) {
        if (id >= s.blocks.size()) violation(fmt::format("free {} id {} is out of range", name, id));
        if (flags[id] & listed_free) violation(fmt::format("{} id {} is free twice", name, id));
        flags[id] |= listed_free;
    }
    for (uint32_t id : s.moved) {
        if (id >= s.blocks.size() || (flags[id] & listed_moved))
            violation(fmt::format("{} moved list is corrupt at id {}", name, id));
        flags[id] |= listed_moved;
    }
    for (uint32_t id : s.fresh)
        if (id < s.blocks.size()) flags[id] |= listed_fresh;

    size_t live = 0, in_place = 0, pending = 0, content_begin = cfg_.arena_bytes, content_end = 0;
    std::vector<uint8_t> device_used(s.at.size(), 0);
    for (uint32_t id = 0; id < s.blocks.size(); ++id) {
        const Block& b = s.blocks[id];
        if (b.dirty != bool(flags[id] & listed_moved))
            violation(fmt::format("{} block {} is {} as moved but {}", name, id, b.dirty ? "marked" : "not marked",
                                  b.dirty ? "not listed" : "listed"));
        if (!b.live) continue;
        ++live;
        if (flags[id] & listed_free) violation(fmt::format("{} id {} is both free and live", name, id));
        if (b.index < first || b.index >= last)
            violation(fmt::format("{} block {} at index {} lies outside its span [{}, {})", name, id, b.index, first, last));
        if (s.at[b.index] != id)
            violation(fmt::format("{} block {} maps to index {}, which maps back to {}", name, id, b.index,
                                  s.at[b.index] == no_id ? std::string("nothing") : std::to_string(s.at[b.index])));
        if (!b.has_content) {  // allocated since the last acknowledgement: its bytes are nowhere yet
            if (!(flags[id] & listed_fresh))
                violation(fmt::format("{} block {} has no contents but was allocated before the last acknowledgement",
                                      name, id));
            ++in_place;
            continue;
        }
        if (b.device_index >= s.at.size())
            violation(fmt::format("{} block {} has its bytes at index {}, outside the arena", name, id, b.device_index));
        if (device_used[b.device_index]++)
            violation(fmt::format("two {} blocks have their bytes at index {}", name, b.device_index));
        content_begin = std::min(content_begin, b.device_index * s.block_bytes);
        content_end = std::max(content_end, (b.device_index + 1) * s.block_bytes);
        if (b.device_index != b.index) {
            ++pending;
            if (!b.dirty) violation(fmt::format("{} block {} moved from {} to {} without a pending move", name, id,
                                                b.device_index, b.index));
        } else {
            ++in_place;
        }
    }
    if (live != s.live) violation(fmt::format("{} live count {} but {} blocks are live", name, s.live, live));
    if (s.free_ids.size() + live != s.blocks.size())
        violation(fmt::format("{} ids: {} free + {} live != {}", name, s.free_ids.size(), live, s.blocks.size()));

    size_t holes = 0;
    for (uint32_t i = 0; i < s.at.size(); ++i) {
        const bool inside = i >= first && i < last;
        if (inside && s.at[i] == no_id) ++holes;
        if (!inside && s.at[i] != no_id)
            violation(fmt::format("{} index {} outside the span [{}, {}) maps to block {}", name, i, first, last, s.at[i]));
        if (s.at[i] != no_id && (s.at[i] >= s.blocks.size() || !s.blocks[s.at[i]].live))
            violation(fmt::format("{} index {} maps to block {}, which is not live", name, i, s.at[i]));
    }
    const size_t span = (last - first) * s.block_bytes;
    const size_t accounted = (in_place + pending + holes) * s.block_bytes;
    if (span != accounted || holes != 0)
        violation(fmt::format("{} span {} bytes != live {} + holes {} + pending moves {} blocks of {} bytes", name, span,
                              in_place, holes, pending, s.block_bytes));
    return {content_begin, content_end};
}

void UnifiedPool::check_invariants() const {
    if (kv_slots_ != kv_.at.size() || size_t(kv_slots_) * kv_.block_bytes > cfg_.arena_bytes)
        violation("the KV index range does not fit the arena");
    if (kv_low_ > kv_slots_) violation(fmt::format("KV frontier {} is above the top index {}", kv_low_, kv_slots_));
    if (state_end() > kv_begin())
        violation(fmt::format("state blocks end at byte {}, past the first KV byte {}", state_end(), kv_begin()));
    const auto state_bytes = check_side(BlockKind::state, 0, static_cast<uint32_t>(state_.live));
    const auto kv_bytes = check_side(BlockKind::kv, kv_low_, kv_slots_);
    // Where the bytes are, the two kinds never overlap either (moves are pending on both sides).
    if (state_bytes.second > kv_bytes.first)
        violation(fmt::format("state bytes (up to {}) overlap KV bytes (from {}) awaiting moves", state_bytes.second,
                              kv_bytes.first));

    // No pending move writes bytes that a pending move reads (so they may run in any order).
    const std::vector<PoolMove> moves = pending_moves();
    std::vector<size_t> by_dst(moves.size());
    for (size_t i = 0; i < moves.size(); ++i) {
        const PoolMove& m = moves[i];
        if (m.src + m.bytes > cfg_.arena_bytes || m.dst + m.bytes > cfg_.arena_bytes)
            violation(fmt::format("move of {} block {} leaves the arena", to_string(m.kind), m.id));
        if (m.dst != offset(m.kind, m.id))
            violation(fmt::format("move of {} block {} does not end at its place", to_string(m.kind), m.id));
        by_dst[i] = i;
    }
    std::sort(by_dst.begin(), by_dst.end(), [&](size_t a, size_t b) { return moves[a].dst < moves[b].dst; });
    for (size_t k = 1; k < by_dst.size(); ++k) {
        const PoolMove& a = moves[by_dst[k - 1]];
        if (a.dst + a.bytes > moves[by_dst[k]].dst) violation("two pending moves write overlapping bytes");
    }
    for (const PoolMove& r : moves) {
        // The last destination starting before the end of r's source is the only one that can overlap it.
        auto it = std::upper_bound(by_dst.begin(), by_dst.end(), r.src + r.bytes - 1,
                                   [&](size_t value, size_t i) { return value < moves[i].dst; });
        if (it == by_dst.begin()) continue;
        const PoolMove& w = moves[*(it - 1)];
        if (w.dst + w.bytes > r.src)
            violation(fmt::format("the move of {} block {} reads bytes that the move of {} block {} writes",
                                  to_string(r.kind), r.id, to_string(w.kind), w.id));
    }
}

}  // namespace kiln::runtime
