#include "serving/engine/serving_engine.hpp"

namespace kiln::serving {

ServingEngine::ServingEngine(model::forward::ForwardExecutor& executor, const model::Tokenizer& tokenizer,
                             const EngineOptions& options, std::string model_name, RequestObserver observer)
    : tokenizer_(tokenizer), core_(executor, tokenizer, options, std::move(observer)), max_waiting_(options.max_waiting) {
    info_.model_name = std::move(model_name);
    info_.max_model_len = core_.max_model_len();
    stats_ = core_.stats();
    thread_ = std::thread([this] { run(); });
}

ServingEngine::~ServingEngine() { shutdown(); }

RequestHandle ServingEngine::submit(GenerationRequest request, std::shared_ptr<EventSink> sink) {
    if (!sink) throw InvalidArgument("engine: submit needs an event sink");
    core_.check_request(request);
    std::lock_guard lock(mu_);
    if (!accepting_ || failed_) throw Unavailable(failed_ ? "the engine failed" : "the engine is shutting down");
    if (queued_ >= max_waiting_)
        throw Overloaded("the engine's waiting queue is full (" + std::to_string(max_waiting_) + " requests)");
    const RequestHandle h = next_handle_++;
    submissions_.push_back({h, std::move(request), std::move(sink)});
    ++queued_;
    wake_.notify_one();
    return h;
}

void ServingEngine::cancel(RequestHandle handle) {
    std::lock_guard lock(mu_);
    cancels_.push_back(handle);
    wake_.notify_one();
}

bool ServingEngine::ready() const {
    std::lock_guard lock(mu_);
    return accepting_ && !failed_;
}

EngineStats ServingEngine::stats() const {
    std::lock_guard lock(mu_);
    EngineStats s = stats_;
    s.waiting += static_cast<uint32_t>(submissions_.size());
    return s;
}

EngineCounters ServingEngine::counters() const {
    std::lock_guard lock(mu_);
    return counters_;
}

void ServingEngine::drain() {
    std::unique_lock lock(mu_);
    accepting_ = false;
    idle_.wait(lock, [&] { return (core_idle_ && submissions_.empty() && cancels_.empty()) || stop_; });
}

void ServingEngine::shutdown() {
    {
        std::lock_guard lock(mu_);
        accepting_ = false;
        stop_ = true;
        wake_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
}

void ServingEngine::publish() {
    std::lock_guard lock(mu_);
    stats_ = core_.stats();
    counters_ = core_.counters();
    core_idle_ = core_.idle();
    failed_ = core_.failed();
    queued_ = submissions_.size() + core_.queued_requests();
    idle_.notify_all();
}

void ServingEngine::run() {
    for (;;) {
        std::vector<Submission> subs;
        std::vector<RequestHandle> cancels;
        bool stopping;
        {
            std::unique_lock lock(mu_);
            wake_.wait(lock, [&] { return stop_ || !submissions_.empty() || !cancels_.empty() || !core_idle_; });
            subs.swap(submissions_);
            cancels.swap(cancels_);
            stopping = stop_;
            core_idle_ = false;
        }
        for (Submission& s : subs) {
            try {
                core_.submit(s.handle, std::move(s.request), s.sink);
            } catch (const Error& e) {  // the engine failed after submit() checked it
                for (uint32_t i = 0; i < s.request.sampling.n; ++i) {
                    GenerationEvent ev;
                    ev.index = i;
                    ev.finish = FinishReason::error;
                    ev.error = e.what();
                    s.sink->on_event(std::move(ev));
                }
            }
        }
        for (RequestHandle h : cancels) core_.cancel(h);
        if (stopping) {
            core_.abort_all("the server is shutting down");
            while (!core_.idle() && core_.step()) {
            }
            publish();
            return;
        }
        core_.step();
        publish();
    }
}

}  // namespace kiln::serving
