#include "tests/serving/stamped_executor.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::test {

using model::forward::ForwardBatch;
using model::forward::SequenceResult;
using model::forward::SequenceStep;
using model::forward::StepResult;

namespace {

uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

}  // namespace

uint64_t StampedExecutor::empty_hash() { return 0x243f6a8885a308d3ULL; }

uint64_t StampedExecutor::extend(uint64_t hash, int32_t token) {
    return mix(hash ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ULL));
}

StampedExecutor::StampedExecutor(Config config) : cfg_(std::move(config)) {
    spec_.slot_bytes = cfg_.slot_bytes;
    spec_.page_bytes = cfg_.token_bytes * static_cast<uint64_t>(cfg_.page_size);
    spec_.page_size = cfg_.page_size;
    spec_.chunk = 64;
    spec_.max_tokens = cfg_.max_tokens;
    spec_.max_seqs = cfg_.max_seqs;
    spec_.max_position = cfg_.max_position;
    spec_.vocab = cfg_.vocab;
    spec_.eos = cfg_.eos;
}

int32_t StampedExecutor::next_token(uint64_t prefix_hash, uint64_t seed) const {
    const uint64_t r = mix(prefix_hash ^ mix(seed + 0x632be59bd9b4e019ULL));
    if (cfg_.eos_period != 0 && !cfg_.eos.empty() && r % cfg_.eos_period == 0) return cfg_.eos[0];
    return static_cast<int32_t>((r >> 16) % static_cast<uint64_t>(cfg_.token_range));
}

void StampedExecutor::fail(const std::string& what) {
    violations_.push_back(fmt::format("step {}: {}", counts_.steps + 1, what));
    throw InvalidArgument("stamped executor: " + violations_.back());
}

void StampedExecutor::reserve(uint64_t arena_bytes) {
    if (arena_ != 0) fail("reserve() called twice");
    if (arena_bytes == 0) fail("an empty arena");
    arena_ = arena_bytes;
}

uint64_t StampedExecutor::slot_offset(int32_t slot, const char* what) {
    if (slot < 0 || (static_cast<uint64_t>(slot) + 1) * spec_.slot_bytes > arena_)
        fail(fmt::format("{} slot {} lies outside the arena", what, slot));
    return static_cast<uint64_t>(slot) * spec_.slot_bytes;
}

uint64_t StampedExecutor::page_offset(int32_t page, const char* what) {
    if (page < 0 || (static_cast<uint64_t>(page) + 1) * spec_.page_bytes > arena_)
        fail(fmt::format("{} page {} lies outside the arena", what, page));
    return arena_ - (static_cast<uint64_t>(page) + 1) * spec_.page_bytes;
}

const StampedExecutor::Region* StampedExecutor::find(uint64_t offset, uint64_t bytes, bool state) const {
    auto it = mem_.find(offset);
    if (it == mem_.end() || it->second.bytes != bytes || it->second.state != state) return nullptr;
    return &it->second;
}

void StampedExecutor::write(uint64_t offset, Region region) {
    const uint64_t end = offset + region.bytes;
    auto it = mem_.lower_bound(offset);
    if (it != mem_.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second.bytes > offset) it = prev;
    }
    while (it != mem_.end() && it->first < end) it = mem_.erase(it);
    mem_.emplace(offset, std::move(region));
}

void StampedExecutor::check_shape(const ForwardBatch& batch) {
    if (arena_ == 0) fail("launch before reserve()");
    if (batch.seqs.empty()) fail("an empty batch");
    if (batch.seqs.size() > static_cast<size_t>(spec_.max_seqs))
        fail(fmt::format("{} sequences, more than max_seqs {}", batch.seqs.size(), spec_.max_seqs));
    size_t tokens = 0;
    std::set<int32_t> working, snapshot, written_pages;
    const auto ps = static_cast<size_t>(spec_.page_size);
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SequenceStep& s = batch.seqs[i];
        const size_t n = s.tokens.size(), start = static_cast<size_t>(s.start);
        if (n == 0 || s.start < 0) fail(fmt::format("sequence {}: {} tokens from position {}", i, n, s.start));
        tokens += n;
        if (start + n > static_cast<size_t>(spec_.max_position)) fail(fmt::format("sequence {} passes the context", i));
        if (s.fresh_state && s.start != 0) fail(fmt::format("sequence {}: a zero state at position {}", i, s.start));
        if (s.pages.size() != (start + n + ps - 1) / ps)
            fail(fmt::format("sequence {}: {} pages for positions [0, {})", i, s.pages.size(), start + n));
        if (!working.insert(s.slot).second) fail(fmt::format("working slot {} is given twice", s.slot));
        int32_t prev = s.start;
        for (const auto& snap : s.snapshots) {
            if (snap.position <= prev || snap.position > static_cast<int32_t>(start + n) || snap.position % spec_.chunk != 0)
                fail(fmt::format("sequence {}: a snapshot at {} outside ({}, {}] or off the chunk grid", i, snap.position,
                                 s.start, start + n));
            prev = snap.position;
            if (!snapshot.insert(snap.slot).second) fail(fmt::format("snapshot slot {} is given twice", snap.slot));
        }
        if (s.feed_from >= 0) {
            if (n != 1 || s.tokens[0] != -1) fail(fmt::format("sequence {}: a fed step must carry one -1 token", i));
            if (static_cast<size_t>(s.feed_from) >= last_sampled_.size() || last_sampled_[s.feed_from] < 0)
                fail(fmt::format("sequence {} is fed from entry {} of the previous step, which sampled nothing", i,
                                 s.feed_from));
        } else {
            for (int32_t t : s.tokens)
                if (t < 0 || t >= spec_.vocab) fail(fmt::format("sequence {}: token {} outside the vocabulary", i, t));
        }
        for (size_t p = start / ps; p < s.pages.size(); ++p)
            if (!written_pages.insert(s.pages[p]).second) fail(fmt::format("page {} is written by two sequences", s.pages[p]));
    }
    if (tokens > static_cast<size_t>(spec_.max_tokens)) fail(fmt::format("{} tokens, more than max_tokens", tokens));
    for (int32_t w : working)
        if (snapshot.count(w)) fail(fmt::format("slot {} is both a working slot and a snapshot", w));
    // A page one sequence writes is in no other sequence's table.
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SequenceStep& s = batch.seqs[i];
        const size_t own = static_cast<size_t>(s.start) / ps;
        for (size_t p = 0; p < own && p < s.pages.size(); ++p)
            if (written_pages.count(s.pages[p]))
                fail(fmt::format("sequence {} reads page {}, which another sequence of the step writes", i, s.pages[p]));
    }
    std::set<int32_t> dst;
    for (const auto& c : batch.copies) {
        if (!dst.insert(c.dst_slot).second) fail(fmt::format("two copies write slot {}", c.dst_slot));
        if (!working.count(c.dst_slot)) fail(fmt::format("a copy writes slot {}, no sequence's working slot", c.dst_slot));
        if (working.count(c.src_slot) || snapshot.count(c.src_slot))
            fail(fmt::format("a copy reads slot {}, which the step itself writes", c.src_slot));
    }
}

StampedExecutor::Ticket StampedExecutor::launch(const ForwardBatch& batch) {
    check_shape(batch);
    const auto ps = static_cast<size_t>(spec_.page_size);

    // Moves: each carries its block's stamp and leaves nothing behind.
    std::vector<std::pair<uint64_t, Region>> moved;
    for (const auto& m : batch.moves) {
        if (m.bytes == 0 || m.src + m.bytes > arena_ || m.dst + m.bytes > arena_) fail("a move leaves the arena");
        auto it = mem_.find(m.src);
        if (it == mem_.end() || it->second.bytes != m.bytes)
            fail(fmt::format("a move reads {} bytes at {}, where no block of that size was written", m.bytes, m.src));
        moved.emplace_back(m.dst, it->second);
    }
    for (const auto& m : batch.moves) mem_.erase(m.src);
    for (auto& [dst, r] : moved) write(dst, std::move(r));
    counts_.moves += batch.moves.size();

    // Copy-on-write restores, read before any is written.
    std::vector<std::pair<uint64_t, Region>> copied;
    for (const auto& c : batch.copies) {
        const Region* r = find(slot_offset(c.src_slot, "copy source"), spec_.slot_bytes, true);
        if (!r) fail(fmt::format("a copy reads slot {}, which holds no state", c.src_slot));
        copied.emplace_back(slot_offset(c.dst_slot, "copy destination"), *r);
    }
    for (auto& [dst, r] : copied) write(dst, std::move(r));
    counts_.copies += batch.copies.size();

    StepResult result;
    std::vector<int32_t> sampled(batch.seqs.size(), -1);
    bool chunk = false, decode = false;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SequenceStep& s = batch.seqs[i];
        const auto start = static_cast<size_t>(s.start);
        const size_t n = s.tokens.size();
        (n > 1 ? chunk : decode) = true;
        const uint64_t slot = slot_offset(s.slot, "working");

        int32_t state_pos = 0;
        uint64_t state_hash = empty_hash();
        if (s.fresh_state) {
            ++counts_.fresh;
        } else {
            const Region* st = find(slot, spec_.slot_bytes, true);
            if (!st) fail(fmt::format("sequence {}: working slot {} holds no state", i, s.slot));
            state_pos = st->pos;
            state_hash = st->hash;
            ++counts_.resumed;
        }
        if (state_pos != s.start)
            fail(fmt::format("sequence {}: working slot {} holds the state after {} tokens, the step starts at {}", i,
                             s.slot, state_pos, s.start));

        // The KV of [0, start): every position present, chaining from the empty prefix to the state.
        std::vector<int32_t> prefix;
        prefix.reserve(start + n);
        uint64_t h = empty_hash();
        for (size_t p = 0; p < start; ++p) {
            const Region* pg = find(page_offset(s.pages[p / ps], "table"), spec_.page_bytes, false);
            if (!pg) fail(fmt::format("sequence {}: page {} (positions from {}) holds no KV", i, s.pages[p / ps], p / ps * ps));
            const KvEntry& e = pg->kv[p % ps];
            if (e.pos != static_cast<int32_t>(p) || e.hash != extend(h, e.token))
                fail(fmt::format("sequence {}: page {} holds no KV of position {} on this prefix", i, s.pages[p / ps], p));
            h = e.hash;
            prefix.push_back(e.token);
        }
        if (h != state_hash)
            fail(fmt::format("sequence {}: the state at {} belongs to another prefix than the KV", i, s.start));

        std::vector<int32_t> tokens = s.tokens;
        std::vector<int32_t> output = s.output;
        if (s.feed_from >= 0) {
            tokens[0] = last_sampled_[static_cast<size_t>(s.feed_from)];
            output.push_back(tokens[0]);
            ++counts_.feeds;
        }
        if (!s.prompt.empty()) {
            // The step's own tokens: the KV it reads and what it computes are its prompt and output so far.
            std::vector<int32_t> expected = s.prompt;
            expected.insert(expected.end(), output.begin(), output.end());
            prefix.insert(prefix.end(), tokens.begin(), tokens.end());
            if (expected != prefix)
                fail(fmt::format("sequence {}: positions [0, {}) are not its prompt ({} tokens) and output ({} tokens)",
                                 i, start + n, s.prompt.size(), output.size()));
            ++counts_.identity_checks;
        }

        size_t snap = 0;
        for (size_t k = 0; k < n; ++k) {
            const size_t p = start + k;
            h = extend(h, tokens[k]);
            const uint64_t off = page_offset(s.pages[p / ps], "written");
            auto it = mem_.find(off);
            if (it == mem_.end() || it->second.bytes != spec_.page_bytes || it->second.state) {
                Region r;
                r.bytes = spec_.page_bytes;
                r.kv.resize(ps);
                write(off, std::move(r));
                it = mem_.find(off);
            }
            it->second.kv[p % ps] = {static_cast<int32_t>(p), tokens[k], h};
            if (snap < s.snapshots.size() && static_cast<size_t>(s.snapshots[snap].position) == p + 1) {
                Region r;
                r.bytes = spec_.slot_bytes;
                r.state = true;
                r.pos = static_cast<int32_t>(p + 1);
                r.hash = h;
                write(slot_offset(s.snapshots[snap].slot, "snapshot"), std::move(r));
                ++snap;
                ++counts_.snapshots;
            }
        }
        Region w;
        w.bytes = spec_.slot_bytes;
        w.state = true;
        w.pos = static_cast<int32_t>(start + n);
        w.hash = h;
        write(slot, std::move(w));

        SequenceResult r;
        if (s.sample && std::find(tokens.begin(), tokens.end(), cfg_.poison) != tokens.end()) {
            r.nonfinite = true;
            sampled[i] = 0;  // whatever the device picks from NaN logits
        } else if (s.sample) {
            r.token = next_token(h, s.sampling.seeded ? s.sampling.seed : 0);
            sampled[i] = r.token;
            if (s.sampling.want_logprobs) {
                r.chosen = {r.token, -static_cast<float>(h % 1000) / 100.0f};
                for (uint32_t k = 0; k < s.sampling.logprobs; ++k)
                    r.top.push_back({static_cast<int32_t>((h >> k) % static_cast<uint64_t>(cfg_.token_range)),
                                     -static_cast<float>(k)});
            }
        }
        result.seqs.push_back(std::move(r));
        counts_.tokens += n;
    }
    ++counts_.steps;
    counts_.seqs += batch.seqs.size();
    counts_.mixed_steps += chunk && decode;
    counts_.max_seqs = std::max<uint64_t>(counts_.max_seqs, batch.seqs.size());
    last_sampled_ = std::move(sampled);
    const Ticket t = next_ticket_++;
    pending_.emplace_back(t, std::move(result));
    return t;
}

StepResult StampedExecutor::wait(Ticket t) {
    if (pending_.empty() || pending_.front().first != t)
        fail(fmt::format("wait({}) out of launch order", t));
    StepResult r = std::move(pending_.front().second);
    pending_.pop_front();
    return r;
}

}  // namespace kiln::test
