#include "serving/engine/engine_core.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "serving/sampler/device_sampling.hpp"

namespace kiln::serving {

using Clock = RequestTiming::Clock;

namespace {

double since(Clock::time_point t) { return RequestTiming::seconds(Clock::now() - t); }

}  // namespace

EngineCore::EngineCore(model::forward::ForwardExecutor& executor, const model::Tokenizer& tokenizer,
                       const EngineOptions& options, RequestObserver observer)
    : executor_(executor),
      tokenizer_(tokenizer),
      opt_(resolve_options(options, executor.memory())),
      observer_(std::move(observer)),
      sched_(executor.memory(), opt_) {
    const model::forward::MemorySpec& spec = executor.memory();
    for (int32_t e : spec.eos)
        if (e >= 0) eos_.push_back(static_cast<TokenId>(e));
    vocab_ = spec.vocab > 0 ? static_cast<uint32_t>(spec.vocab) : tokenizer.vocab_size();
    // Unless told otherwise, a sequence may be as long as the KV pages can hold (SGLang's rule): a context
    // the memory cannot hold would only turn into a memory error per request.
    if (options.max_model_len == 0) {
        const uint64_t kv_tokens = static_cast<uint64_t>(sched_.memory().kv().capacity()) * opt_.page_size;
        opt_.max_model_len = static_cast<uint32_t>(std::clamp<uint64_t>(kv_tokens, 2, opt_.max_model_len));
    }
    executor_.reserve(sched_.memory().arena_bytes());
}

EngineCore::~EngineCore() {
    abort_all("the engine stopped");
    if (in_flight_) {
        try {
            executor_.wait(in_flight_->ticket);
        } catch (...) {  // the step's results are of no use any more
        }
    }
}

void EngineCore::check_request(const GenerationRequest& r) const {
    const size_t len = r.prompt.size();
    const uint32_t max_tokens = r.sampling.max_tokens;
    if (len == 0) throw InvalidRequest("prompt", "prompt: the prompt is empty");
    if (r.sampling.n == 0) throw InvalidRequest("n", "n: must be at least 1");
    if (max_tokens == 0) throw InvalidRequest("max_tokens", "max_tokens: must be at least 1");
    if (len >= opt_.max_model_len)
        throw InvalidRequest("prompt", fmt::format("prompt: {} tokens leave no room to generate within the context of "
                                                   "{} tokens", len, opt_.max_model_len));
    if (len + max_tokens > opt_.max_model_len)
        throw InvalidRequest("max_tokens", fmt::format("max_tokens: {} prompt tokens and {} to generate exceed the "
                                                       "context of {} tokens", len, max_tokens, opt_.max_model_len));
    for (TokenId t : r.prompt)
        if (t >= vocab_)
            throw InvalidRequest("prompt", fmt::format("prompt: token id {} is outside the vocabulary of {}", t, vocab_));
    if (!sched_.fits_alone(len, len + max_tokens))
        throw InvalidRequest("prompt", fmt::format("prompt: {} tokens and {} to generate need more memory than the "
                                                   "engine has ({} bytes for KV pages of {} tokens and state slots)",
                                                   len, max_tokens, sched_.memory().arena_bytes(), opt_.page_size));
}

void EngineCore::submit(RequestHandle handle, GenerationRequest request, std::shared_ptr<EventSink> sink) {
    if (failed_) throw Unavailable("the engine failed and takes no requests");
    Request q;
    q.handle = handle;
    q.req = std::move(request);
    q.sink = std::move(sink);
    q.priority = next_priority_++;
    const uint32_t n = q.req.sampling.n;
    q.seqs.resize(n);
    q.unfinished = n;
    q.timing.id = q.req.id;
    q.timing.handle = handle;
    q.timing.arrival = q.req.arrival;
    q.timing.sequences = n;
    q.timing.prompt_tokens = q.req.prompt.size();
    auto [it, fresh] = requests_.emplace(handle, std::move(q));
    if (!fresh) throw InvalidArgument(fmt::format("engine: request handle {} is in use", handle));
    Request& rq = it->second;
    for (SeqState& s : rq.seqs) s.output.emplace(tokenizer_, rq.req.sampling, eos_);
    queue_sequence(rq, 0);
    if (n > 1 && !opt_.options.enable_prefix_cache) {
        for (uint32_t i = 1; i < n; ++i) queue_sequence(rq, i);
        rq.siblings_queued = true;
    } else {
        pending_siblings_ += n - 1;
    }
    unstarted_.insert(handle);
}

void EngineCore::queue_sequence(Request& q, uint32_t index) {
    scheduler::SequenceSpec s;
    s.prompt.assign(q.req.prompt.begin(), q.req.prompt.end());
    s.max_tokens = q.req.sampling.max_tokens;
    s.sampling = sampler::device_sampling(q.req.sampling, index);
    s.priority = q.priority;
    q.seqs[index].seq = sched_.add(std::move(s));
    owners_[q.seqs[index].seq] = {q.handle, index};
}

void EngineCore::emit(Request& q, GenerationEvent&& event) {
    try {
        q.sink->on_event(std::move(event));
    } catch (...) {  // a sink must not throw; the engine goes on regardless
    }
}

// Final event of one sequence that ends other than through its own output (abort, error).
void EngineCore::end_sequence(Request& q, uint32_t index, FinishReason reason, const std::string& error) {
    SeqState& ss = q.seqs[index];
    if (ss.done) return;
    GenerationEvent ev;
    ev.index = index;
    ev.finish = reason;
    ev.error = error;
    if (ss.seq != 0) {
        if (const scheduler::Sequence* s = sched_.find(ss.seq)) {
            ev.cached_prompt_tokens = static_cast<uint32_t>(std::max<int64_t>(s->cached_tokens, 0));
            q.timing.cached_tokens += ev.cached_prompt_tokens;
            q.timing.output_tokens += s->generated();
            q.timing.preemptions += s->preemptions;
            sched_.remove(ss.seq);
        }
        owners_.erase(ss.seq);
    } else {
        --pending_siblings_;
    }
    ss.done = true;
    --q.unfinished;
    if (index == 0) q.timing.finish = reason;
    emit(q, std::move(ev));
}

void EngineCore::end_request(Request& q, FinishReason reason, const std::string& error) {
    for (uint32_t i = 0; i < q.seqs.size(); ++i) end_sequence(q, i, reason, error);
}

void EngineCore::finish_request(RequestHandle handle) {
    auto it = requests_.find(handle);
    if (it == requests_.end()) return;
    it->second.timing.finished = Clock::now();
    if (observer_) {
        try {
            observer_(it->second.timing);
        } catch (...) {  // an observer must not throw either
        }
    }
    unstarted_.erase(handle);
    requests_.erase(it);
}

void EngineCore::cancel(RequestHandle handle, const std::string& reason) {
    auto it = requests_.find(handle);
    if (it == requests_.end()) return;
    end_request(it->second, FinishReason::abort, reason);
    finish_request(handle);
}

void EngineCore::abort_all(const std::string& reason) {
    std::vector<RequestHandle> handles;
    for (const auto& [h, q] : requests_) handles.push_back(h);
    for (RequestHandle h : handles) cancel(h, reason);
}

void EngineCore::fail_all(const std::string& reason) {
    std::vector<RequestHandle> handles;
    for (const auto& [h, q] : requests_) handles.push_back(h);
    for (RequestHandle h : handles) {
        end_request(requests_.at(h), FinishReason::error, reason);
        finish_request(h);
    }
}

void EngineCore::on_launch(const scheduler::StepPlan& plan) {
    if (plan.admitted == 0) return;
    const Clock::time_point now = Clock::now();
    for (const scheduler::PlannedStep& st : plan.steps) {
        auto o = owners_.find(st.seq);
        if (o == owners_.end()) continue;
        Request& q = requests_.at(o->second.first);
        if (!q.timing.scheduled()) {
            q.timing.first_scheduled = now;
            unstarted_.erase(q.handle);
        }
    }
}

bool EngineCore::step() {
    if (failed_) return false;
    try {
        const Clock::time_point t0 = Clock::now();
        scheduler::StepPlan next = sched_.plan(in_flight_ ? &in_flight_->plan : nullptr);
        plan_seconds_ += since(t0);
        std::optional<InFlight> launched;
        if (!next.empty()) {
            const auto ticket = executor_.launch(next.batch);
            ++steps_;
            on_launch(next);
            launched.emplace(InFlight{ticket, std::move(next)});
        }
        if (next.empty() && !in_flight_ && sched_.running() == 0) {
            // Nothing runs and the queue's head cannot be admitted into the empty memory: it never will.
            if (const scheduler::SeqId head = sched_.head_of_queue(); head != 0) {
                const RequestHandle h = owners_.at(head).first;
                end_request(requests_.at(h), FinishReason::error, "the request does not fit in the engine's memory");
                finish_request(h);
                return true;
            }
        }
        std::optional<InFlight> done;
        if (opt_.options.overlap_schedule) {
            done.swap(in_flight_);
            in_flight_.swap(launched);
        } else {
            done.swap(launched);
        }
        if (!done) return in_flight_.has_value();
        const model::forward::StepResult result = executor_.wait(done->ticket);
        const Clock::time_point t1 = Clock::now();
        commit(done->plan, result);
        commit_seconds_ += since(t1);
        return true;
    } catch (const std::exception& e) {
        in_flight_.reset();
        failed_ = true;
        fail_all(fmt::format("engine: {}", e.what()));
        return true;
    }
}

void EngineCore::commit(const scheduler::StepPlan& plan, const model::forward::StepResult& result) {
    const std::vector<scheduler::Sampled> sampled = sched_.commit(plan, result);
    const Clock::time_point now = Clock::now();
    for (const scheduler::Sampled& x : sampled) {
        auto o = owners_.find(x.seq);
        if (o == owners_.end()) continue;
        const auto [handle, index] = o->second;
        Request& q = requests_.at(handle);
        SeqState& ss = q.seqs[index];
        const model::forward::SequenceResult& r = result.seqs[x.index];
        if (r.nonfinite) {
            end_request(q, FinishReason::error, "the model produced non-finite logits");
            finish_request(handle);
            continue;
        }
        const auto token = static_cast<TokenId>(r.token);
        const scheduler::Sequence& s = *sched_.find(x.seq);
        sampler::OutputDelta d = ss.output->push(token, s.tokens.size() >= opt_.max_model_len);

        GenerationEvent ev;
        ev.index = index;
        ev.tokens.push_back(token);
        ev.text = std::move(d.text);
        if (q.req.sampling.logprobs) {
            TokenLogprobs lp;
            lp.chosen = {token, r.chosen.logprob};
            for (const model::forward::TokenLogprob& t : r.top) lp.top.push_back({static_cast<TokenId>(t.token), t.logprob});
            ev.logprobs.push_back(std::move(lp));
        }
        if (!q.timing.has_token()) q.timing.first_token = now;
        if (ss.last_token != Clock::time_point{})
            q.timing.inter_token_seconds.push_back(RequestTiming::seconds(now - ss.last_token));
        ss.last_token = now;

        // The prompt is in the tree now (its last grid checkpoint donated): the other sequences can start.
        if (index == 0 && !q.siblings_queued) {
            for (uint32_t i = 1; i < q.seqs.size(); ++i) queue_sequence(q, i);
            pending_siblings_ -= q.seqs.size() - 1;
            q.siblings_queued = true;
        }
        if (d.finish) {
            ev.finish = d.finish;
            ev.stop_string = std::move(d.stop_string);
            ev.stop_token = d.stop_token;
            ev.cached_prompt_tokens = static_cast<uint32_t>(std::max<int64_t>(s.cached_tokens, 0));
            q.timing.cached_tokens += ev.cached_prompt_tokens;
            q.timing.output_tokens += s.generated();
            q.timing.preemptions += s.preemptions;
            if (index == 0) q.timing.finish = *d.finish;
            sched_.remove(x.seq);
            owners_.erase(x.seq);
            ss.done = true;
            --q.unfinished;
        }
        emit(q, std::move(ev));
        if (q.unfinished == 0) finish_request(handle);
    }
}

EngineStats EngineCore::stats() const {
    EngineStats st;
    st.running = static_cast<uint32_t>(sched_.running());
    st.waiting = static_cast<uint32_t>(sched_.waiting() + pending_siblings_);
    st.kv_usage = sched_.memory().kv_usage();
    st.state_usage = sched_.memory().state_usage();
    const memory::PrefixCacheStats& cs = sched_.memory().tree().stats();
    st.prefix_cache_queries = cs.query_tokens;
    st.prefix_cache_hits = cs.hit_tokens;
    st.preemptions = sched_.counters().preemptions;
    return st;
}

EngineCounters EngineCore::counters() const {
    EngineCounters c;
    c.scheduler = sched_.counters();
    c.prefix_cache = sched_.memory().tree().stats();
    c.steps = steps_;
    c.moves = sched_.memory().moves();
    c.moved_bytes = sched_.memory().moved_bytes();
    c.plan_seconds = plan_seconds_;
    c.commit_seconds = commit_seconds_;
    return c;
}

}  // namespace kiln::serving
