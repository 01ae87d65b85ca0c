// The host target's Stream and Event (runtime/backend.hpp), with CUDA stream semantics, so serving code
// does not care where a kernel runs.
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

#include "runtime/backend.hpp"
#include "runtime/error.hpp"
#include "runtime/host/kernel_abi.h"
#include "runtime/host/thread_pool.hpp"

namespace kiln::runtime {

// A work item on a host stream failed (the message names the kernel or work item).
class HostExecutionError : public Error {
public:
    using Error::Error;
};

class HostEvent final : public Event {
public:
    HostEvent();

    BackendKind kind() const override { return BackendKind::host; }
    // True when the most recent record has been reached (or the event was never recorded).
    bool query() const override;
    // Blocks until the most recent record has been reached.
    void synchronize() const override;
    double elapsed_ms_since(const Event& start) const override;
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

class HostBackend;

class HostStream final : public Stream {
public:
    explicit HostStream(HostBackend& backend);
    ~HostStream() override;
    HostStream(const HostStream&) = delete;
    HostStream& operator=(const HostStream&) = delete;

    // Runs `work` after everything enqueued before it. `what` names it in error messages.
    void enqueue(std::function<void()> work, std::string what = "host work item");
    Backend& backend() const override;
    // Launches a host kernel (k.host): `params` (bytes) are copied now; k.host(ctx, copy) runs in order
    // with k.host_scratch_bytes of scratch memory in ctx. The grid of `dims` is not used.
    void launch(const KernelHandle& k, const LaunchDims& dims, const void* params, size_t bytes) override;
    using Stream::launch;
    void copy(uint64_t dst, uint64_t src, size_t bytes) override;
    void upload(uint64_t dst, const void* src, size_t bytes) override;
    void download(void* dst, uint64_t src, size_t bytes) override;
    void fill_u8(uint64_t dst, uint8_t value, size_t count) override;
    void fill_u32(uint64_t dst, uint32_t value, size_t count) override;

    void record(Event& ev) override;
    void wait(const Event& ev) override;

    // Blocks until all enqueued work has run; rethrows the stream's first error.
    void synchronize() override;
    // True when all enqueued work has run (an error counts as done).
    bool query() const;

    HostThreadPool& pool() const;

private:
    struct Item {
        std::function<void()> fn;
        std::string what;
        bool always = false;  // event records run even after an error
    };
    void push(Item item);
    void loop();

    HostBackend& backend_;
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


// The host backend: 64-byte aligned host memory, host streams on a thread pool.
class HostBackend final : public Backend {
public:
    explicit HostBackend(HostThreadPool& pool = HostThreadPool::global()) : pool_(pool) {}

    BackendKind kind() const override { return BackendKind::host; }
    std::string name() const override;
    int compute_units() const override { return static_cast<int>(pool_.threads()); }
    Buffer alloc(size_t bytes) override;
    std::unique_ptr<Stream> create_stream() override;
    std::unique_ptr<Event> create_event(bool timing = true) override;
    void upload(uint64_t dst, const void* src, size_t bytes) override;
    void download(void* dst, uint64_t src, size_t bytes) override;

    HostThreadPool& pool() const { return pool_; }

protected:
    void free(uint64_t addr, size_t bytes) noexcept override;

private:
    HostThreadPool& pool_;
};

}  // namespace kiln::runtime
