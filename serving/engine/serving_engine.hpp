// The serving engine behind the thread-safe Engine interface: an EngineCore on its own thread.
// submit() and cancel() hand work over through an inbox and return at once; the thread applies them
// between steps, runs steps while there is work, and sleeps otherwise. stats() is the snapshot the
// thread published after its last step.
//
// Per-request timing (queue time, TTFT, inter-token gaps, end-to-end) goes to the RequestObserver
// given at construction, on the engine's thread (see request_timing.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "serving/engine/engine_core.hpp"

namespace kiln::serving {

class ServingEngine final : public Engine {
public:
    // The executor and the tokenizer must outlive the engine. Throws InvalidArgument for bad options.
    ServingEngine(model::forward::ForwardExecutor& executor, const model::Tokenizer& tokenizer,
                  const EngineOptions& options, std::string model_name, RequestObserver observer = {});
    ~ServingEngine() override;  // shutdown()

    RequestHandle submit(GenerationRequest request, std::shared_ptr<EventSink> sink) override;
    void cancel(RequestHandle handle) override;
    bool ready() const override;
    EngineStats stats() const override;
    EngineInfo info() const override { return info_; }
    const model::Tokenizer& tokenizer() const override { return tokenizer_; }

    // Takes no new requests (Unavailable) and returns once every request has finished.
    void drain();
    // Takes no new requests, ends every request with an abort event and stops the thread. Idempotent.
    void shutdown();
    EngineCounters counters() const;

private:
    struct Submission {
        RequestHandle handle = 0;
        GenerationRequest request;
        std::shared_ptr<EventSink> sink;
    };
    void run();
    void publish();

    const model::Tokenizer& tokenizer_;
    EngineCore core_;
    EngineInfo info_;
    uint32_t max_waiting_;

    mutable std::mutex mu_;
    std::condition_variable wake_;   // the engine thread: work or stop
    std::condition_variable idle_;   // drain(): the engine went idle
    std::vector<Submission> submissions_;
    std::vector<RequestHandle> cancels_;
    uint64_t next_handle_ = 1;
    size_t queued_ = 0;              // requests not yet started: in the inbox or queued in the core
    bool accepting_ = true;
    bool stop_ = false;
    bool core_idle_ = true;
    bool failed_ = false;
    EngineStats stats_;
    EngineCounters counters_;
    std::thread thread_;
};

}  // namespace kiln::serving
