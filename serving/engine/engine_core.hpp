// The serving engine's loop on one thread, without locks: requests in, GenerationEvents out, one
// scheduler::Scheduler and one ForwardExecutor. ServingEngine runs it on its own thread behind the
// thread-safe Engine interface; tests and benchmarks may drive it directly, step by step.
//
// step() is one turn of the loop. With overlap_schedule it plans and launches step N+1 while step N
// runs, then waits for N and commits it; without, it plans, launches, waits and commits one step.
// Committing a step turns each sampled token into an event: stop conditions and text through
// sampler::SequenceOutput, logprobs from the device, and the final event (with the prompt tokens
// served from the prefix cache) when the sequence ends; the sequence's memory goes back at once.
//
// A request with n > 1 sequences runs sequence 0 first; with the prefix cache on, the others are
// queued when sequence 0 has committed its first token, so they find the prompt in the tree
// (checkpoint at the last grid position before its end) and compute only the rest.
//
// An executor error fails every request (FinishReason::error) and leaves the engine failed(); a
// non-finite result fails only its request.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/forward/executor.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "serving/engine/engine_options.hpp"
#include "serving/engine/request.hpp"
#include "serving/engine/request_timing.hpp"
#include "serving/sampler/sequence_output.hpp"
#include "serving/scheduler/scheduler.hpp"

namespace kiln::serving {

// What the engine did since start-up, beyond EngineStats.
struct EngineCounters {
    scheduler::SchedulerCounters scheduler;
    memory::PrefixCacheStats prefix_cache;
    uint64_t steps = 0;            // launched
    uint64_t moves = 0;            // unified pool compaction moves enqueued
    uint64_t moved_bytes = 0;
    double plan_seconds = 0.0;     // host time spent planning steps
    double commit_seconds = 0.0;   // host time spent committing steps (events included)
};

class EngineCore {
public:
    // Reserves the executor's arena. The executor and the tokenizer must outlive the core.
    EngineCore(model::forward::ForwardExecutor& executor, const model::Tokenizer& tokenizer, const EngineOptions& options,
               RequestObserver observer = {});
    ~EngineCore();
    EngineCore(const EngineCore&) = delete;
    EngineCore& operator=(const EngineCore&) = delete;

    // Throws InvalidRequest when the request can never run (empty or too long a prompt, max_tokens past
    // the context, a token outside the vocabulary, more KV than the engine has). Safe on any thread.
    void check_request(const GenerationRequest& request) const;
    // Queues a checked request under a handle the caller chose (unique among live requests).
    void submit(RequestHandle handle, GenerationRequest request, std::shared_ptr<EventSink> sink);
    // Ends the request now: frees its memory, sends each unfinished sequence a final abort event.
    // Unknown or finished handles are ignored.
    void cancel(RequestHandle handle, const std::string& reason = "cancelled");
    void abort_all(const std::string& reason);

    bool step();  // false when there was nothing to run or commit
    bool idle() const { return requests_.empty() && !in_flight_; }
    bool failed() const { return failed_; }

    size_t requests() const { return requests_.size(); }
    size_t queued_requests() const { return unstarted_.size(); }  // none of its sequences admitted yet
    EngineStats stats() const;
    EngineCounters counters() const;
    uint32_t max_model_len() const { return opt_.max_model_len; }
    const ResolvedOptions& options() const { return opt_; }
    const scheduler::Scheduler& scheduler() const { return sched_; }

    void clear_prefix_cache() { sched_.clear_prefix_cache(); }  // between requests only
    void check_invariants() const { sched_.check_invariants(); }

private:
    struct SeqState {
        scheduler::SeqId seq = 0;  // 0: not queued yet (a later sibling)
        std::optional<sampler::SequenceOutput> output;
        bool done = false;
        RequestTiming::Clock::time_point last_token;
    };
    struct Request {
        RequestHandle handle = 0;
        GenerationRequest req;
        std::shared_ptr<EventSink> sink;
        std::vector<SeqState> seqs;
        uint32_t unfinished = 0;
        bool siblings_queued = false;
        uint64_t priority = 0;
        RequestTiming timing;
    };
    struct InFlight {
        model::forward::ForwardExecutor::Ticket ticket = 0;
        scheduler::StepPlan plan;
    };

    void queue_sequence(Request& q, uint32_t index);
    void commit(const scheduler::StepPlan& plan, const model::forward::StepResult& result);
    void on_launch(const scheduler::StepPlan& plan);
    void emit(Request& q, GenerationEvent&& event);
    void end_sequence(Request& q, uint32_t index, FinishReason reason, const std::string& error);
    void end_request(Request& q, FinishReason reason, const std::string& error);
    void finish_request(RequestHandle handle);
    void fail_all(const std::string& reason);

    model::forward::ForwardExecutor& executor_;
    const model::Tokenizer& tokenizer_;
    ResolvedOptions opt_;
    RequestObserver observer_;
    scheduler::Scheduler sched_;
    std::vector<TokenId> eos_;
    uint32_t vocab_ = 0;
    std::map<RequestHandle, Request> requests_;
    std::unordered_map<scheduler::SeqId, std::pair<RequestHandle, uint32_t>> owners_;
    std::set<RequestHandle> unstarted_;
    std::optional<InFlight> in_flight_;
    uint64_t next_priority_ = 0;
    size_t pending_siblings_ = 0;
    bool failed_ = false;
    uint64_t steps_ = 0;
    double plan_seconds_ = 0.0;
    double commit_seconds_ = 0.0;
};

}  // namespace kiln::serving
