#include "serving/scheduler/scheduler.hpp"

#include <algorithm>
#include <span>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/invariant_violation.hpp"
#include "serving/sampler/device_sampling.hpp"

namespace kiln::serving::scheduler {

namespace {

[[noreturn]] void violation(const std::string& what) { throw InvariantViolation("scheduler invariant: " + what); }

}  // namespace

struct Scheduler::Pending {
    struct Entry {
        SeqId seq = 0;
        size_t start = 0;
        size_t count = 0;
        bool sample = false;
        int32_t feed = -1;
        bool fresh = false;
        memory::Checkpoint snapshot;
    };
    std::vector<Entry> entries;
    std::vector<std::pair<SlotId, SlotId>> copies;  // checkpoint slot -> working slot
    size_t budget = 0;
    size_t prefill_tokens = 0;
    size_t decode_tokens = 0;
    size_t admitted = 0;
};

Scheduler::Scheduler(const model::forward::MemorySpec& spec, const ResolvedOptions& options)
    : opt_(options),
      spec_(spec),
      memory_(spec, options),
      cache_(options.options.enable_prefix_cache),
      slots_per_seq_(cache_ ? 3 : 1) {
    if (!fits_alone(1, 1))
        throw InvalidArgument(fmt::format("--memory-bytes: {} bytes of memory hold no sequence ({} state slots with the "
                                          "prefix cache {}, and KV pages)", memory_.arena_bytes(), slots_per_seq_,
                                          cache_ ? "on" : "off"));
}

bool Scheduler::fits_alone(size_t prompt, size_t total) const {
    const memory::KvPagePool& kv = memory_.kv();
    return memory_.fits_alone(slots_per_seq_, kv.pages_for(prompt) + 1) && memory_.fits_alone(1, kv.pages_for(total));
}

SeqId Scheduler::head_of_queue() const {
    for (const Key& k : waiting_)
        if (seqs_.at(k.second)->in_flight == 0) return k.second;
    return 0;
}

Sequence& Scheduler::seq(SeqId id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) throw InvalidArgument(fmt::format("scheduler: no sequence {}", id));
    return *it->second;
}

const Sequence* Scheduler::find(SeqId id) const {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? nullptr : it->second.get();
}

SeqId Scheduler::add(SequenceSpec spec) {
    if (spec.prompt.empty()) throw InvalidArgument("scheduler: a sequence needs at least one prompt token");
    auto s = std::make_unique<Sequence>();
    s->id = next_id_++;
    s->priority = spec.priority;
    s->prompt_len = spec.prompt.size();
    s->tokens = std::move(spec.prompt);
    s->max_tokens = spec.max_tokens;
    s->sampling = spec.sampling;
    s->pass_prompt = sampler::needs_prompt(spec.sampling);
    s->pass_output = sampler::needs_output(spec.sampling);
    const SeqId id = s->id;
    waiting_.insert(key(*s));
    seqs_.emplace(id, std::move(s));
    return id;
}

void Scheduler::release(Sequence& s) {
    if (!s.running) return;
    memory_.kv().release(s.pages);
    s.pages.clear();
    s.table.clear();
    if (s.working != memory::no_slot) memory_.state().free(s.working);
    s.working = memory::no_slot;
    memory_.state().free(s.snapshots);
    s.snapshots.clear();
    if (s.locked) memory_.tree().unlock(s.lock);
    s.locked = false;
}

void Scheduler::remove(SeqId id) {
    Sequence& s = seq(id);
    release(s);
    running_.erase(key(s));
    waiting_.erase(key(s));
    seqs_.erase(id);
}

void Scheduler::preempt(Sequence& s) {
    release(s);
    running_.erase(key(s));
    s.running = false;
    ++s.epoch;
    s.computed = 0;
    s.branch_len = 0;
    waiting_.insert(key(s));
    ++s.preemptions;
    ++counters_.preemptions;
}

// Pages up to position `end`; evicts the prefix cache, then (may_preempt) preempts the newest running
// sequences, which have not been planned yet in this step. False when `s` is left without them
// (preempted itself when may_preempt).
bool Scheduler::reserve_pages(Sequence& s, size_t end, bool may_preempt) {
    const size_t want = memory_.kv().pages_for(end);
    while (s.pages.size() < want) {
        const size_t need = want - s.pages.size();
        if (memory_.kv().allocate(need, s.pages)) return true;
        if (memory_.make_room(0, need)) continue;
        if (!may_preempt) return false;
        Sequence& victim = seq(running_.rbegin()->second);
        preempt(victim);
        if (&victim == &s) return false;
    }
    return true;
}

size_t Scheduler::snapshot_at(const Sequence& s, size_t start, size_t end) const {
    if (!cache_) return 0;
    if (end <= s.prefill_end) {
        const size_t limit = std::min(end, s.prefill_end - 1);
        const size_t q = limit / opt_.grid * opt_.grid;
        return q > start ? q : 0;
    }
    return opt_.track_interval != 0 && end % opt_.track_interval == 0 ? end : 0;
}

void Scheduler::add_step(Pending& p, Sequence& s, size_t count, int32_t feed, bool fresh) {
    Pending::Entry e;
    e.seq = s.id;
    e.start = s.computed;
    e.count = count;
    e.feed = feed;
    e.fresh = fresh;
    const size_t end = e.start + count;
    e.sample = (feed >= 0 || end == s.tokens.size()) && s.wants_sample();
    if (const size_t q = snapshot_at(s, e.start, end); q != 0) {
        std::vector<SlotId> slot;
        const bool got = s.snapshots.size() < 2 &&
                         (memory_.state().allocate(1, slot) ||
                          (memory_.tree().evict_checkpoints(1).slots_freed != 0 && memory_.state().allocate(1, slot)));
        if (got) {
            s.snapshots.push_back(slot[0]);
            e.snapshot = {q, slot[0]};
            ++counters_.snapshots;
        } else {
            ++counters_.snapshots_skipped;
        }
    }
    s.computed = end;
    if (e.sample) ++s.in_flight;
    p.budget -= count;
    if (count == 1 && e.sample) ++p.decode_tokens;
    else p.prefill_tokens += count;
    s.planned = plan_number_;
    p.entries.push_back(e);
}

// Preempts the newest running sequence that is newer than `s` and has no step in this plan.
bool Scheduler::preempt_newer(const Sequence& s) {
    for (auto it = running_.rbegin(); it != running_.rend() && *it > key(s); ++it) {
        Sequence& v = seq(it->second);
        if (v.planned == plan_number_) continue;
        preempt(v);
        return true;
    }
    return false;
}

bool Scheduler::schedule_chunk(Pending& p, Sequence& s, bool fresh, bool may_preempt) {
    const size_t c = s.computed, known = s.tokens.size(), g = opt_.grid;
    if (known <= c || p.budget == 0) return false;
    // The chunk's end: on the grid unless it is the prompt's last, and never past a branch point.
    const auto shape = [&](size_t n) {
        size_t e = c + n;
        if (e < known && e / g * g > c) e = e / g * g;
        if (s.branch_len > c && s.branch_len < e) e = s.branch_len;
        return e - c;
    };
    size_t n = std::min(known - c, p.budget);
    if (opt_.options.prefill_chunk != 0) n = std::min<size_t>(n, opt_.options.prefill_chunk);
    n = shape(n);
    while (!reserve_pages(s, c + n, false)) {
        // As much as the pages left allow; with none left, newer sequences give theirs back (else
        // prefills that hold every page between them would wait for each other forever).
        const size_t max_end = (s.pages.size() + memory_.kv().available()) * memory_.kv().page_size();
        if (max_end > c) {
            n = shape(std::min(n, max_end - c));
            if (reserve_pages(s, c + n, false)) break;
            return false;
        }
        if (!may_preempt || !preempt_newer(s)) return false;
    }
    add_step(p, s, n, -1, fresh);
    return true;
}

void Scheduler::admit(Pending& p) {
    std::vector<SeqId> order;
    order.reserve(waiting_.size());
    for (const Key& k : waiting_) order.push_back(k.second);
    const size_t ps = memory_.kv().page_size();
    for (SeqId id : order) {
        if (p.budget == 0 || p.entries.size() >= static_cast<size_t>(spec_.max_seqs) || running_.size() >= opt_.max_running)
            break;
        Sequence& s = seq(id);
        if (s.in_flight != 0) continue;  // its last token is still in the step in flight
        memory::PrefixMatch m;
        if (cache_) m = memory_.tree().match_prefix(s.tokens, false);
        const size_t restore = m.state_len;
        // What the running sequences may still claim: slots up to their three, the rest of their prompts.
        size_t owned = 0, prompts = 0;
        for (const Key& k : running_) {
            const Sequence& r = seq(k.second);
            owned += r.owned_slots();
            const size_t want = memory_.kv().pages_for(r.prefill_end);
            if (want > r.pages.size()) prompts += want - r.pages.size();
        }
        const size_t slots = slots_per_seq_ * (running_.size() + 1) - std::min(owned, slots_per_seq_ * running_.size());
        const size_t pages = memory_.kv().pages_for(s.tokens.size()) - restore / ps + prompts + running_.size() + 1;
        if (!memory_.can_fit(slots, pages)) break;

        if (cache_) {
            m = memory_.tree().match_prefix(s.tokens, true);
            memory_.tree().lock(m.state_node);  // pins the restore source and the path's KV
            s.lock = m.state_node;
            s.locked = true;
        }
        s.running = true;
        waiting_.erase(key(s));
        running_.insert(key(s));
        std::vector<SlotId> w;
        const bool got = memory_.state().allocate(1, w) || (memory_.make_room(1, 0) && memory_.state().allocate(1, w));
        if (got) {
            s.working = w[0];
            s.pages.assign(m.pages.begin(), m.pages.begin() + static_cast<std::ptrdiff_t>(restore / ps));
            memory_.kv().retain(s.pages);
            s.computed = restore;
            s.prefill_end = s.tokens.size();
            s.branch_len = m.branch_len > restore ? m.branch_len : 0;
        }
        if (!got || !schedule_chunk(p, s, restore == 0, false)) {
            release(s);
            running_.erase(key(s));
            s.running = false;
            s.computed = 0;
            s.branch_len = 0;
            waiting_.insert(key(s));
            break;
        }
        if (restore != 0) {
            p.copies.emplace_back(m.state_slot, s.working);
            ++counters_.restores;
            counters_.restored_tokens += restore;
        }
        if (s.cached_tokens < 0) s.cached_tokens = static_cast<int64_t>(restore);
        ++counters_.admissions;
        ++p.admitted;
    }
}

StepPlan Scheduler::plan(const StepPlan* in_flight) {
    Pending p;
    p.budget = opt_.max_batch_tokens;
    ++plan_number_;
    if (in_flight)
        for (size_t i = 0; i < in_flight->steps.size(); ++i) {
            const PlannedStep& st = in_flight->steps[i];
            auto it = seqs_.find(st.seq);
            if (st.sample && it != seqs_.end()) {
                it->second->fed_from = static_cast<int32_t>(i);
                it->second->fed_in = plan_number_;
            }
        }

    std::vector<SeqId> order;
    order.reserve(running_.size());
    for (const Key& k : running_) order.push_back(k.second);
    const auto max_seqs = static_cast<size_t>(spec_.max_seqs);

    // Decodes: one token each, the previous one known or still in flight.
    for (SeqId id : order) {
        if (p.entries.size() >= max_seqs) break;
        auto it = seqs_.find(id);
        if (it == seqs_.end() || !it->second->running) continue;  // preempted in this step
        Sequence& s = *it->second;
        const size_t r = s.remaining();
        if (r > 1) continue;
        int32_t feed = -1;
        if (r == 0) {
            if (!s.wants_sample() || s.fed_in != plan_number_) continue;
            feed = s.fed_from;
        }
        if (s.planned == plan_number_) violation(fmt::format("sequence {} was preempted after it was planned", id));
        if (!reserve_pages(s, s.computed + 1, true)) continue;
        add_step(p, s, 1, feed, false);
    }
    // Prefill chunks of running sequences, oldest first.
    for (SeqId id : order) {
        if (p.budget == 0 || p.entries.size() >= max_seqs) break;
        auto it = seqs_.find(id);
        if (it == seqs_.end() || !it->second->running || it->second->planned == plan_number_) continue;
        if (it->second->remaining() > 1) schedule_chunk(p, *it->second, false, true);
    }
    admit(p);

    StepPlan plan;
    finalize(p, plan);
    return plan;
}

void Scheduler::finalize(Pending& p, StepPlan& plan) {
    // An empty step is not launched: its moves wait for the next one.
    if (p.entries.empty()) return;
    // After every allocation and free of this step: the moves, then the batch indices.
    memory_.take_moves(plan.batch.moves);
    for (const auto& [src, dst] : p.copies) plan.batch.copies.push_back({memory_.slot_index(src), memory_.slot_index(dst)});
    plan.batch.seqs.reserve(p.entries.size());
    plan.steps.reserve(p.entries.size());
    for (const Pending::Entry& e : p.entries) {
        Sequence& s = seq(e.seq);
        model::forward::SequenceStep st;
        if (e.feed >= 0) st.tokens.assign(1, -1);
        else
            st.tokens.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(e.start),
                             s.tokens.begin() + static_cast<std::ptrdiff_t>(e.start + e.count));
        st.start = static_cast<int32_t>(e.start);
        st.slot = memory_.slot_index(s.working);
        st.fresh_state = e.fresh;
        // The page table, translated once per page while the layout holds.
        const size_t n_pages = memory_.kv().pages_for(e.start + e.count);
        if (s.layout != memory_.layout()) {
            s.table.clear();
            s.layout = memory_.layout();
        }
        for (size_t i = s.table.size(); i < n_pages; ++i) s.table.push_back(memory_.page_index(s.pages[i]));
        st.pages.assign(s.table.begin(), s.table.begin() + static_cast<std::ptrdiff_t>(n_pages));
        if (e.snapshot.pos != 0)
            st.snapshots.push_back({static_cast<int32_t>(e.snapshot.pos), memory_.slot_index(e.snapshot.slot)});
        st.sample = e.sample;
        if (e.sample) {
            st.sampling = s.sampling;
            const auto prompt_end = s.tokens.begin() + static_cast<std::ptrdiff_t>(s.prompt_len);
            if (s.pass_prompt) st.prompt.assign(s.tokens.begin(), prompt_end);
            if (s.pass_output) st.output.assign(prompt_end, s.tokens.end());
        }
        st.feed_from = e.feed;
        plan.batch.seqs.push_back(std::move(st));
        plan.steps.push_back({e.seq, s.epoch, e.start, e.count, e.sample, e.snapshot});
    }
    plan.prefill_tokens = p.prefill_tokens;
    plan.decode_tokens = p.decode_tokens;
    plan.admitted = p.admitted;
    ++counters_.steps;
    counters_.prefill_tokens += p.prefill_tokens;
    counters_.decode_tokens += p.decode_tokens;
}

void Scheduler::donate(Sequence& s, const memory::Checkpoint& c) {
    auto it = std::find(s.snapshots.begin(), s.snapshots.end(), c.slot);
    if (it == s.snapshots.end()) violation(fmt::format("sequence {} donates slot {}, which it does not own", s.id, c.slot));
    s.snapshots.erase(it);
    const std::span<const Token> tokens(s.tokens.data(), c.pos);
    const std::span<PageId> pages(s.pages.data(), c.pos / memory_.kv().page_size());
    const memory::Checkpoint given[1] = {c};
    const memory::InsertResult r = memory_.tree().insert(tokens, pages, given, memory::PageRefs::keep);
    if (r.duplicate_pages != 0) s.table.clear();  // some of its pages are the tree's now
    memory_.tree().lock(r.tail);
    memory_.tree().unlock(s.lock);
    s.lock = r.tail;
    ++counters_.checkpoints_donated;
}

std::vector<Sampled> Scheduler::commit(const StepPlan& plan, const model::forward::StepResult& result) {
    if (result.seqs.size() != plan.steps.size())
        throw Error(fmt::format("engine: the executor returned {} results for a step of {} sequences", result.seqs.size(),
                                plan.steps.size()));
    std::vector<Sampled> out;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
        const PlannedStep& st = plan.steps[i];
        auto it = seqs_.find(st.seq);
        if (it == seqs_.end()) continue;  // finished or cancelled since
        Sequence& s = *it->second;
        if (st.sample && s.in_flight > 0) --s.in_flight;
        if (st.snapshot.pos != 0 && s.running && s.epoch == st.epoch) donate(s, st.snapshot);
        if (!st.sample) continue;
        const model::forward::SequenceResult& r = result.seqs[i];
        if (!r.nonfinite) {
            if (r.token < 0 || (spec_.vocab > 0 && r.token >= spec_.vocab))
                throw Error(fmt::format("engine: the executor sampled token {} outside the vocabulary", r.token));
            s.tokens.push_back(r.token);
        }
        out.push_back({st.seq, i});
    }
    return out;
}

void Scheduler::clear_prefix_cache() {
    if (!running_.empty()) throw InvalidArgument("scheduler: the prefix cache cannot be cleared while sequences run");
    memory_.tree().clear();
}

void Scheduler::check_invariants() const {
    memory::OutsideHolds holds;
    size_t running = 0, waiting = 0;
    for (const auto& [id, sp] : seqs_) {
        const Sequence& s = *sp;
        if (!s.running) {
            ++waiting;
            if (!waiting_.count(key(s))) violation(fmt::format("waiting sequence {} is not queued", id));
            if (!s.pages.empty() || s.working != memory::no_slot || !s.snapshots.empty() || s.locked)
                violation(fmt::format("waiting sequence {} holds memory", id));
            continue;
        }
        ++running;
        if (!running_.count(key(s))) violation(fmt::format("running sequence {} is not listed", id));
        if (s.working == memory::no_slot) violation(fmt::format("running sequence {} has no working slot", id));
        if (s.snapshots.size() > 2) violation(fmt::format("sequence {} owns {} snapshot slots", id, s.snapshots.size()));
        if (s.owned_slots() > slots_per_seq_) violation(fmt::format("sequence {} owns {} slots", id, s.owned_slots()));
        if (s.pages.size() < memory_.kv().pages_for(s.computed))
            violation(fmt::format("sequence {} computed {} positions on {} pages", id, s.computed, s.pages.size()));
        if (s.locked != cache_)
            violation(fmt::format("sequence {} {} a prefix lock", id, s.locked ? "holds" : "lacks"));
        if (s.computed > s.tokens.size() + s.in_flight || s.in_flight > 1)
            violation(fmt::format("sequence {}: {} computed, {} tokens, {} in flight", id, s.computed, s.tokens.size(),
                                  s.in_flight));
        if (s.table.size() > s.pages.size()) violation(fmt::format("sequence {}: a page table past its pages", id));
        if (s.layout == memory_.layout() && !memory_.moves_pending())  // else the next step's moves renew it
            for (size_t i = 0; i < s.table.size(); ++i)
                if (s.table[i] != memory_.page_index(s.pages[i]))
                    violation(fmt::format("sequence {}: page table entry {} is stale", id, i));
        holds.pages.insert(holds.pages.end(), s.pages.begin(), s.pages.end());
        holds.slots.push_back(s.working);
        holds.slots.insert(holds.slots.end(), s.snapshots.begin(), s.snapshots.end());
    }
    if (running != running_.size() || waiting != waiting_.size())
        violation(fmt::format("{} running / {} waiting sequences, listed {} / {}", running, waiting, running_.size(),
                              waiting_.size()));
    memory_.check_invariants();
    memory_.tree().check_invariants(holds);
}

}  // namespace kiln::serving::scheduler
