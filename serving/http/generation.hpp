// One API request's life on the engine: its prompts submitted (all or none), their events pumped to
// the HTTP thread, latencies recorded, and everything cancelled when the client leaves, the server
// drains past its deadline, or the job is dropped unfinished.
//
// Choices: prompt p's sequence i is choice p·n + i. A job is driven by one HTTP thread (pump); cancel()
// may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "serving/engine/request.hpp"
#include "serving/http/client_connection.hpp"
#include "serving/http/metrics.hpp"

namespace kiln::serving::http {

// Queues events from the engine's thread for the HTTP thread, stamped with their arrival, and wakes
// it through an eventfd.
class EventQueue {
public:
    struct Item {
        uint32_t prompt = 0;
        GenerationEvent event;
        std::chrono::steady_clock::time_point at;
    };

    EventQueue();
    ~EventQueue();
    EventQueue(const EventQueue&) = delete;
    EventQueue& operator=(const EventQueue&) = delete;

    void push(uint32_t prompt, GenerationEvent&& event);
    void wake();               // wakes the reader without an event
    std::vector<Item> take();  // everything queued so far (clears the wake-up)
    int wake_fd() const { return fd_; }

private:
    std::mutex mu_;
    std::deque<Item> items_;
    int fd_ = -1;
};

class GenerationJob {
public:
    enum class Status {
        done,         // every sequence finished
        client_gone,  // the connection closed, or on_event refused (a failed write): cancelled
        cancelled,    // cancel() was called: cancelled
    };

    // `requests[p]` is prompt p; all share the same n.
    GenerationJob(Engine& engine, ServingMetrics& metrics, std::vector<GenerationRequest> requests);
    ~GenerationJob();  // cancels unfinished work
    GenerationJob(const GenerationJob&) = delete;
    GenerationJob& operator=(const GenerationJob&) = delete;

    // Submits every prompt. On any failure (Overloaded, Unavailable, InvalidRequest, ...) the prompts
    // already submitted are cancelled and the exception propagates.
    void submit();

    // Delivers events as they come (in order per choice) until every sequence has finished, the
    // client goes away, on_event returns false, or cancel() is called. The final event of a choice
    // is delivered like any other (its finish may be stop, length, abort or error).
    Status pump(const ClientConnection& conn,
                const std::function<bool(uint32_t choice, const GenerationEvent&)>& on_event);

    // Cancels every unfinished sequence (thread-safe); pump returns Status::cancelled.
    void cancel();
    // Cancels the engine requests without waking pump (for the job's own use and early exits).
    void cancel_engine_requests();

    uint32_t choices() const { return static_cast<uint32_t>(finished_.size()); }
    bool finished() const { return unfinished_ == 0; }
    uint64_t prompt_tokens() const;

private:
    void record_end();

    Engine& engine_;
    ServingMetrics& metrics_;
    std::vector<GenerationRequest> requests_;
    uint32_t n_;
    std::shared_ptr<EventQueue> queue_;
    std::vector<RequestHandle> handles_;
    std::mutex handles_mu_;
    std::vector<bool> finished_;                                     // per choice
    std::vector<std::chrono::steady_clock::time_point> last_token_;  // per choice
    std::vector<uint64_t> tokens_;                                   // per choice
    uint32_t unfinished_ = 0;
    bool first_token_seen_ = false;
    bool ended_ = false;
    std::atomic<bool> cancel_requested_{false};
};

}  // namespace kiln::serving::http
