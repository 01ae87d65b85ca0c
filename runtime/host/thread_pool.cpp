#include "runtime/host/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>

#include <fmt/format.h>

#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace kiln::runtime {

namespace {
// Set while a thread runs a chunk: nested parallel loops run inline instead of queueing behind
// themselves.
thread_local bool t_in_chunk = false;

struct ChunkScope {
    bool saved = t_in_chunk;
    ChunkScope() { t_in_chunk = true; }
    ~ChunkScope() { t_in_chunk = saved; }
};

void abi_parallel_for(void* pool, int64_t n, int64_t grain, kiln_host_range_fn fn, void* arg) {
    static_cast<HostThreadPool*>(pool)->parallel_for(n, grain, fn, arg);
}
}  // namespace

struct HostThreadPool::Job {
    int64_t n = 0, grain = 1, chunks = 0;
    kiln_host_range_fn fn = nullptr;
    void* arg = nullptr;
    const std::function<void(int64_t, int64_t)>* body = nullptr;
    std::atomic<int64_t> next{0};     // next chunk index to claim
    std::atomic<int64_t> pending{0};  // chunks not yet finished
    std::mutex mu;
    std::condition_variable done_cv;
    std::exception_ptr error;
};

HostThreadPool::HostThreadPool(unsigned threads) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    workers_.reserve(threads - 1);
    for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

HostThreadPool::~HostThreadPool() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
}

HostThreadPool& HostThreadPool::global() {
    static HostThreadPool pool([] {
        int64_t n = env::get_int("KILN_HOST_THREADS", 0);
        if (n < 0 || n > 4096)
            throw InvalidArgument(fmt::format("KILN_HOST_THREADS={}: expected 0 (all cores) to 4096", n));
        return static_cast<unsigned>(n);
    }());
    return pool;
}

kiln_host_ctx HostThreadPool::abi_context() {
    kiln_host_ctx c{};
    c.abi_version = KILN_HOST_ABI_VERSION;
    c.num_threads = threads();
    c.pool = this;
    c.parallel_for = &abi_parallel_for;
    c.status = nullptr;
    c.scratch = nullptr;
    c.scratch_bytes = 0;
    return c;
}

// Claims and runs chunks until none are left. Returns true if this call finished the last chunk.
bool HostThreadPool::run_chunks(Job& job) {
    bool finished_last = false;
    ChunkScope scope;
    for (;;) {
        int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
        if (c >= job.chunks) break;
        int64_t b = c * job.grain, e = std::min(job.n, b + job.grain);
        try {
            if (job.fn) job.fn(job.arg, b, e);
            else (*job.body)(b, e);
        } catch (...) {
            std::lock_guard lk(job.mu);
            if (!job.error) job.error = std::current_exception();
        }
        if (job.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finished_last = true;
    }
    return finished_last;
}

void HostThreadPool::worker_loop() {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
            if (stop_ && jobs_.empty()) return;
            job = jobs_.front();
            // Every chunk claimed: nobody else needs to see this job.
            if (job->next.load(std::memory_order_relaxed) >= job->chunks) {
                jobs_.pop_front();
                continue;
            }
        }
        if (run_chunks(*job)) {
            std::lock_guard lk(job->mu);
            job->done_cv.notify_all();
        }
    }
}

void HostThreadPool::run(const std::shared_ptr<Job>& job) {
    if (workers_.empty() || job->chunks == 1 || t_in_chunk) {
        run_chunks(*job);
    } else {
        {
            std::lock_guard lk(mu_);
            jobs_.push_back(job);
        }
        if (job->chunks == 2) cv_.notify_one();
        else cv_.notify_all();
        run_chunks(*job);
        {
            // Every chunk is claimed now: take the job off the queue if no worker did.
            std::lock_guard lk(mu_);
            auto it = std::find(jobs_.begin(), jobs_.end(), job);
            if (it != jobs_.end()) jobs_.erase(it);
        }
        std::unique_lock lk(job->mu);
        job->done_cv.wait(lk, [&] { return job->pending.load(std::memory_order_acquire) == 0; });
    }
    if (job->error) std::rethrow_exception(job->error);
}

static void plan(int64_t n, int64_t grain, unsigned threads, int64_t& out_grain, int64_t& out_chunks) {
    if (grain <= 0) grain = std::max<int64_t>(1, (n + 4 * threads - 1) / (4 * static_cast<int64_t>(threads)));
    out_grain = grain;
    out_chunks = (n + grain - 1) / grain;
}

void HostThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 0) return;
    auto job = std::make_shared<Job>();
    job->n = n;
    plan(n, grain, threads(), job->grain, job->chunks);
    job->body = &body;
    job->pending.store(job->chunks);
    run(job);
}

void HostThreadPool::parallel_for(int64_t n, int64_t grain, kiln_host_range_fn fn, void* arg) {
    if (n <= 0) return;
    auto job = std::make_shared<Job>();
    job->n = n;
    plan(n, grain, threads(), job->grain, job->chunks);
    job->fn = fn;
    job->arg = arg;
    job->pending.store(job->chunks);
    run(job);
}

}  // namespace kiln::runtime
