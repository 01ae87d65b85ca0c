// The thread pool that runs the parallel loops inside host kernels.
//
// parallel_for(n, grain, body) splits [0, n) into chunks and runs them on the pool's workers and on
// the calling thread, returning when all chunks are done; the first exception thrown by a chunk is
// rethrown to the caller once every chunk has finished. Several threads (e.g. several host
// streams) may run parallel loops at once; a parallel_for issued from inside a chunk runs inline.
// The process-wide pool has KILN_HOST_THREADS threads (default: hardware concurrency), counting
// the caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/host/kernel_abi.h"

namespace kiln::runtime {

class HostThreadPool {
public:
    // `threads` counts the calling thread: threads - 1 workers are started. 0 = hardware concurrency.
    explicit HostThreadPool(unsigned threads);
    ~HostThreadPool();
    HostThreadPool(const HostThreadPool&) = delete;
    HostThreadPool& operator=(const HostThreadPool&) = delete;

    // KILN_HOST_THREADS threads (default: hardware concurrency); created on first use.
    static HostThreadPool& global();

    unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

    // grain <= 0: about four chunks per thread.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);
    // The same through the C ABI (what JIT-compiled kernels call).
    void parallel_for(int64_t n, int64_t grain, kiln_host_range_fn fn, void* arg);

    // The kiln_host_ctx fields for this pool (abi_version, num_threads, pool, parallel_for).
    kiln_host_ctx abi_context();

private:
    struct Job;
    void worker_loop();
    void run(const std::shared_ptr<Job>& job);
    static bool run_chunks(Job& job);

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> jobs_;
    bool stop_ = false;
    std::vector<std::thread> workers_;
};

}  // namespace kiln::runtime
