// The host target's streams and events, with CUDA stream semantics, so serving code does not care
// where a kernel runs.
//
// HostStream: work enqueued on one stream runs in order, one item at a time, on the stream's own
// thread; enqueue returns at once. A host kernel launched on a stream gets its argument bytes
// copied at launch (like CUDA kernel parameters), the thread pool for its parallel loops and a
// scratch buffer of the requested size (like dynamic shared memory; one per stream, reused).
// Errors are sticky: once an item throws, later items on that stream are skipped (event records
// still complete, so other streams never hang on them) and synchronize() rethrows the first error,
// every time. Destroying a stream waits for the work already enqueued.
//
// HostEvent: record(ev) on a stream marks the point after all work enqueued so far; wait(ev) on
// another stream makes its later work wait for the most recent record at the time of the call
// (no-op if never recorded); query/synchronize/elapsed_ms follow cudaEvent* semantics.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/error.hpp"
#include "runtime/host_kernel_abi.h"
#include "runtime/host_thread_pool.hpp"

namespace kiln::runtime {

// A work item on a host stream failed (the message names the kernel or work item).
class HostExecutionError : public Error {
public:
    using Error::Error;
};

class HostEvent {
public:
    HostEvent();

    // True when the most recent record has been reached (or the event was never recorded).
    bool query() const;
    // Blocks until the most recent record has been reached.
    void synchronize() const;
    // Milliseconds between two completed records. Throws HostExecutionError if either event was
    // never recorded or has not completed yet.
    static double elapsed_ms(const HostEvent& start, const HostEvent& end);

private:
    friend class HostStream;
    struct State {
        mutable std::mutex mu;
        std::condition_variable cv;
        uint64_t recorded = 0;   // generation of the most recent record() call
        uint64_t completed = 0;  // highest generation reached
        std::chrono::steady_clock::time_point when{};
    };
    std::shared_ptr<State> st_;
};

class HostStream {
public:
    explicit HostStream(HostThreadPool& pool = HostThreadPool::global());
    ~HostStream();
    HostStream(const HostStream&) = delete;
    HostStream& operator=(const HostStream&) = delete;

    // Runs `work` after everything enqueued before it. `what` names it in error messages.
    void enqueue(std::function<void()> work, std::string what = "host work item");
    // Launches a host kernel: `args` (size bytes) are copied now; entry(ctx, copy) runs in order
    // with at least `scratch_bytes` of scratch memory in ctx.
    void launch(kiln_host_entry entry, const void* args, size_t size, std::string kernel_name,
                uint64_t scratch_bytes = 0);

    void record(HostEvent& ev);
    void wait(const HostEvent& ev);

    // Blocks until all enqueued work has run; rethrows the stream's first error.
    void synchronize();
    // True when all enqueued work has run (an error counts as done).
    bool query() const;

    HostThreadPool& pool() const { return pool_; }

private:
    struct Item {
        std::function<void()> fn;
        std::string what;
        bool always = false;  // event records run even after an error
    };
    void push(Item item);
    void loop();

    HostThreadPool& pool_;
    mutable std::mutex mu_;
    std::condition_variable cv_;       // wakes the stream thread
    std::condition_variable idle_cv_;  // wakes synchronize()
    std::deque<Item> queue_;
    bool busy_ = false;
    bool stop_ = false;
    std::exception_ptr error_;
    // Kernel scratch memory: touched only by the stream thread.
    struct FreeDeleter {
        void operator()(void* p) const;
    };
    std::unique_ptr<void, FreeDeleter> scratch_;
    uint64_t scratch_bytes_ = 0;
    void* scratch(uint64_t bytes);
    std::thread thread_;
};

}  // namespace kiln::runtime
