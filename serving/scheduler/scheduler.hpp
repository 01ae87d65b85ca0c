// Continuous batching over hybrid memory: admission, chunked prefill beside decodes, the prefix cache
// (restore, snapshot, donate), eviction and preemption. Single-threaded; the engine drives it in
// overlap order:
//
//     plan(N+1, in flight: N) -> launch N+1 -> wait N -> commit(N) -> plan(N+2, in flight: N+1) ...
//
// plan() builds a step from what the host knows while step N runs. A sequence whose previous token
// is still in step N decodes with ForwardBatch's feed_from (the device passes the token on), so no
// sequence waits for the host. Every state transition is a kernel of a step, so stream order is the
// only synchronisation: a slot or page freed on the host is reused only by later steps, which run
// after every step that still reads or writes it; a snapshot goes to the tree only at the commit of
// the step that wrote it (its write is launched and waited, and no later step writes that slot).
//
// Per step, in order: one-token steps of running sequences (decodes), oldest first, each preempting
// newer sequences when no KV page can be had; then prefill chunks of running sequences, oldest first,
// within the token budget and the pages left (preempting newer sequences not in the step only when
// not one page is left); then admission from the waiting queue in priority order (stopping at the
// first that does not fit). A prefill chunk that is not a prompt's last ends on the checkpoint grid
// lcm(64, page_size) when the budget allows, and at a branch point when it passes one.
//
// Prefix cache. Admission matches the tokens: the request resumes at the deepest checkpoint (a
// StateCopy from the checkpoint into its fresh working slot, first in the step, and the cached pages
// up to it) and pins it; otherwise its working slot starts from the zero state. Snapshots: at most one
// per step and sequence: in a prefill chunk the last grid position in it, strictly before the end
// of the prompt (so an exact repeat of the prompt hits); in decode every track_interval positions;
// skipped when no slot can be had without evicting more than checkpoints. At the commit of a step its
// snapshot is donated (inserted with its prefix's pages; the sequence keeps its references), and the
// sequence moves its lock there.
//
// Admission needs, counting what evicting unlocked cache entries would free: three slots for the new
// sequence and for every running one up to three owned (working + ping-pong; one without a prefix
// cache), and KV pages for the rest of its prompt, the rest of the running sequences' prompts and one
// page per running sequence. Preemption frees everything a sequence holds and queues it again with
// all its tokens (prompt and generated); it is recomputed (through the prefix cache when on) and never
// lost. An empty plan must not be launched (its moves stay pending); a non-empty one must be.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/forward/executor.hpp"
#include "serving/engine/engine_options.hpp"
#include "serving/scheduler/hybrid_memory.hpp"
#include "serving/scheduler/step_plan.hpp"

namespace kiln::serving::scheduler {

struct SequenceSpec {
    std::vector<Token> prompt;
    uint32_t max_tokens = 1;
    model::forward::Sampling sampling;
    uint64_t priority = 0;
};

struct SchedulerCounters {
    uint64_t steps = 0;
    uint64_t prefill_tokens = 0;
    uint64_t decode_tokens = 0;
    uint64_t admissions = 0;
    uint64_t preemptions = 0;
    uint64_t restores = 0;              // copy-on-write restores from a checkpoint
    uint64_t restored_tokens = 0;       // positions those restores skipped
    uint64_t snapshots = 0;             // snapshots planned
    uint64_t snapshots_skipped = 0;     // wanted, but no slot could be had
    uint64_t checkpoints_donated = 0;   // snapshots handed to the tree
};

// A sampled token of a committed step, for a sequence that still exists (see commit()).
struct Sampled {
    SeqId seq = 0;
    size_t index = 0;  // into the step's results
};

class Scheduler {
public:
    Scheduler(const model::forward::MemorySpec& spec, const ResolvedOptions& options);

    // Queues a sequence; its prompt must be non-empty.
    SeqId add(SequenceSpec spec);
    // Frees everything the sequence holds at once and forgets it (finished, cancelled or failed).
    void remove(SeqId seq);

    StepPlan plan(const StepPlan* in_flight);
    // Applies the waited step: donates its snapshots, appends its sampled tokens (not a non-finite
    // one) and returns, in batch order, every sampled entry whose sequence still exists.
    std::vector<Sampled> commit(const StepPlan& plan, const model::forward::StepResult& result);

    const Sequence* find(SeqId seq) const;
    // Whether a sequence of `prompt` tokens that may grow to `total` could run with nothing else in
    // memory (admission's reserve included).
    bool fits_alone(size_t prompt, size_t total) const;
    // The first waiting sequence that admission would try (0: none).
    SeqId head_of_queue() const;
    size_t running() const { return running_.size(); }
    size_t waiting() const { return waiting_.size(); }
    bool empty() const { return seqs_.empty(); }
    const SchedulerCounters& counters() const { return counters_; }
    HybridMemory& memory() { return memory_; }
    const HybridMemory& memory() const { return memory_; }
    const ResolvedOptions& options() const { return opt_; }

    // Drops every cache entry; throws InvalidArgument while sequences run.
    void clear_prefix_cache();
    // The tree with every reference the running sequences hold, the pools, and each sequence's holdings
    // against the slot policy. Throws InvariantViolation.
    void check_invariants() const;

private:
    using Key = std::pair<uint64_t, SeqId>;
    struct Pending;  // a step being planned, before its ids become batch indices

    Sequence& seq(SeqId id);
    Key key(const Sequence& s) const { return {s.priority, s.id}; }
    void release(Sequence& s);
    void preempt(Sequence& s);
    bool reserve_pages(Sequence& s, size_t end, bool may_preempt);
    size_t snapshot_at(const Sequence& s, size_t start, size_t end) const;
    void add_step(Pending& p, Sequence& s, size_t count, int32_t feed, bool fresh);
    bool preempt_newer(const Sequence& s);
    bool schedule_chunk(Pending& p, Sequence& s, bool fresh, bool may_preempt);
    void admit(Pending& p);
    void donate(Sequence& s, const memory::Checkpoint& c);
    void finalize(Pending& p, StepPlan& plan);

    ResolvedOptions opt_;
    model::forward::MemorySpec spec_;
    HybridMemory memory_;
    bool cache_;
    size_t slots_per_seq_;
    std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
    std::set<Key> running_;
    std::set<Key> waiting_;
    SeqId next_id_ = 1;
    uint64_t plan_number_ = 0;
    SchedulerCounters counters_;
};

}  // namespace kiln::serving::scheduler
