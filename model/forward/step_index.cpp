#include "model/forward/step_index.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::forward {

StepIndexHost build_step_index(const ForwardBatch& b, const StepLimits& L) {
    StepIndexHost x;
    const int32_t n = int32_t(b.seqs.size());
    if (n == 0) throw InvalidArgument("forward step has no sequences");
    if (L.max_seqs > 0 && n > L.max_seqs)
        throw InvalidArgument(fmt::format("forward step has {} sequences, more than the plan's {}", n, L.max_seqs));
    x.num_seqs = n;
    x.cu_seqlens.reserve(n + 1);
    x.cu_seqlens.push_back(0);
    int32_t max_pages = 1;
    for (int32_t s = 0; s < n; ++s) {
        const SequenceStep& q = b.seqs[s];
        const auto t = int32_t(q.tokens.size());
        if (t == 0) throw InvalidArgument(fmt::format("sequence {} of the step has no new tokens", s));
        if (q.start < 0) throw InvalidArgument(fmt::format("sequence {}: start {} is negative", s, q.start));
        if (q.fresh_state && q.start != 0)
            throw InvalidArgument(fmt::format("sequence {}: a fresh state must start at position 0, not {}", s, q.start));
        if (q.slot < 0 || q.slot >= L.num_slots)
            throw InvalidArgument(fmt::format("sequence {}: state slot {} outside [0, {})", s, q.slot, L.num_slots));
        const int64_t end = int64_t(q.start) + t;
        if (L.max_position > 0 && end > L.max_position)
            throw InvalidArgument(fmt::format("sequence {}: positions up to {} exceed the model's context of {}", s, end, L.max_position));
        const int64_t need = (end + L.page_size - 1) / L.page_size;
        if (int64_t(q.pages.size()) < need)
            throw InvalidArgument(fmt::format("sequence {}: {} KV pages cover fewer than its {} positions", s, q.pages.size(), end));
        for (int32_t p : q.pages)
            if (p < 0 || p >= L.num_pages) throw InvalidArgument(fmt::format("sequence {}: KV page {} outside [0, {})", s, p, L.num_pages));
        for (size_t i = 0; i < q.tokens.size(); ++i) {
            const int32_t id = q.tokens[i];
            const bool fed = i == 0 && q.feed_from >= 0 && id == -1;
            if (!fed && (id < 0 || (L.vocab > 0 && id >= L.vocab)))
                throw InvalidArgument(fmt::format("sequence {}: token id {} outside the vocabulary of {}", s, id, L.vocab));
        }
        if (q.feed_from >= 0 && q.tokens[0] != -1)
            throw InvalidArgument(fmt::format("sequence {}: fed from the previous step but its first token is {}, not -1", s, q.tokens[0]));
        for (const Snapshot& sn : q.snapshots) {
            if (sn.position <= q.start || sn.position > end || sn.position % L.chunk != 0)
                throw InvalidArgument(fmt::format("sequence {}: snapshot at {} is not a multiple of {} in ({}, {}]", s, sn.position, L.chunk, q.start, end));
            if (sn.slot < 0 || sn.slot >= L.num_slots || sn.slot == q.slot)
                throw InvalidArgument(fmt::format("sequence {}: snapshot slot {} is invalid", s, sn.slot));
        }
        max_pages = std::max<int32_t>(max_pages, int32_t(need));
        x.max_new_tokens = std::max(x.max_new_tokens, t);
        x.num_decodes += t == 1;
        x.cu_seqlens.push_back(x.cu_seqlens.back() + t);
    }
    x.num_tokens = x.cu_seqlens.back();
    if (L.max_tokens > 0 && x.num_tokens > L.max_tokens)
        throw InvalidArgument(fmt::format("forward step has {} new tokens, more than the plan's {}", x.num_tokens, L.max_tokens));
    // Two sequences updating one working slot in one step would race.
    std::vector<int32_t> slots;
    for (const auto& q : b.seqs) slots.push_back(q.slot);
    std::sort(slots.begin(), slots.end());
    if (std::adjacent_find(slots.begin(), slots.end()) != slots.end())
        throw InvalidArgument("two sequences of the step share a state slot");

    x.max_pages = max_pages;
    x.page_table.assign(size_t(n) * max_pages, 0);
    x.tokens.reserve(x.num_tokens);
    x.token_seq.reserve(x.num_tokens);
    x.token_pos.reserve(x.num_tokens);
    for (int32_t s = 0; s < n; ++s) {
        const SequenceStep& q = b.seqs[s];
        x.seq_start.push_back(q.start);
        x.seq_slot.push_back(q.slot);
        const int32_t need = (q.start + int32_t(q.tokens.size()) + L.page_size - 1) / L.page_size;
        std::copy(q.pages.begin(), q.pages.begin() + need, x.page_table.begin() + size_t(s) * max_pages);
        for (size_t i = 0; i < q.tokens.size(); ++i) {
            x.tokens.push_back(q.tokens[i]);
            x.token_seq.push_back(s);
            x.token_pos.push_back(q.start + int32_t(i));
        }
        for (const Snapshot& sn : q.snapshots) {
            x.snap_seq.push_back(s);
            x.snap_pos.push_back(sn.position);
            x.snap_slot.push_back(sn.slot);
        }
    }
    return x;
}

kiln_params::StepIndex StepIndexStaging::upload(const StepIndexHost& x, uint64_t arena_base, uint64_t arena_bytes,
                                                uint64_t slot_bytes, uint64_t page_bytes, int32_t page_size,
                                                runtime::Backend& backend, runtime::Stream& stream) {
    const std::vector<int32_t>* parts[] = {&x.cu_seqlens, &x.seq_start, &x.seq_slot, &x.token_seq, &x.token_pos,
                                           &x.page_table, &x.snap_seq, &x.snap_pos, &x.snap_slot, &x.tokens};
    size_t offs[10];
    host_.clear();
    for (int i = 0; i < 10; ++i) {
        host_.resize((host_.size() + 3) / 4 * 4);  // 16-byte aligned parts
        offs[i] = host_.size();
        host_.insert(host_.end(), parts[i]->begin(), parts[i]->end());
    }
    host_.resize(std::max<size_t>(host_.size(), 4));
    const size_t bytes = host_.size() * 4;
    if (!dev_ || dev_.size() < bytes) dev_ = backend.alloc(std::max<size_t>(bytes * 2, 4096));
    stream.upload(dev_.addr(), host_.data(), bytes);
    auto at = [&](int i) { return reinterpret_cast<const int32_t*>(dev_.addr() + offs[i] * 4); };
    kiln_params::StepIndex p{};
    p.cu_seqlens = at(0);
    p.seq_start = at(1);
    p.seq_slot = at(2);
    p.token_seq = at(3);
    p.token_pos = at(4);
    p.page_table = at(5);
    p.snap_seq = at(6);
    p.snap_pos = at(7);
    p.snap_slot = at(8);
    tokens_ = dev_.addr() + offs[9] * 4;
    p.arena_base = arena_base;
    p.arena_bytes = arena_bytes;
    p.slot_bytes = slot_bytes;
    p.page_bytes = page_bytes;
    p.num_seqs = x.num_seqs;
    p.num_tokens = x.num_tokens;
    p.max_pages = x.max_pages;
    p.page_size = page_size;
    p.num_snaps = x.num_snaps();
    p.max_new_tokens = x.max_new_tokens;
    return p;
}

}  // namespace kiln::model::forward
