#include "runtime/host_executor.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace kiln::runtime {

HostEvent::HostEvent() : st_(std::make_shared<State>()) {}

bool HostEvent::query() const {
    std::lock_guard lk(st_->mu);
    return st_->completed >= st_->recorded;
}

void HostEvent::synchronize() const {
    std::unique_lock lk(st_->mu);
    uint64_t g = st_->recorded;
    st_->cv.wait(lk, [&] { return st_->completed >= g; });
}

double HostEvent::elapsed_ms(const HostEvent& start, const HostEvent& end) {
    auto stamp = [](const HostEvent& e, const char* which) {
        std::lock_guard lk(e.st_->mu);
        if (e.st_->recorded == 0)
            throw HostExecutionError(fmt::format("elapsed time: the {} event was never recorded", which));
        if (e.st_->completed < e.st_->recorded)
            throw HostExecutionError(fmt::format("elapsed time: the {} event has not completed yet", which));
        return e.st_->when;
    };
    auto a = stamp(start, "start"), b = stamp(end, "end");
    return std::chrono::duration<double, std::milli>(b - a).count();
}

HostStream::HostStream(HostThreadPool& pool) : pool_(pool), thread_([this] { loop(); }) {}

HostStream::~HostStream() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
}

void HostStream::push(Item item) {
    {
        std::lock_guard lk(mu_);
        queue_.push_back(std::move(item));
    }
    cv_.notify_one();
}

void HostStream::enqueue(std::function<void()> work, std::string what) {
    push(Item{std::move(work), std::move(what), false});
}

void HostStream::FreeDeleter::operator()(void* p) const { std::free(p); }

void* HostStream::scratch(uint64_t bytes) {
    if (bytes == 0) return nullptr;
    if (bytes > scratch_bytes_) {
        uint64_t n = (bytes + 63) / 64 * 64;
        void* p = std::aligned_alloc(64, n);
        if (p == nullptr) throw HostExecutionError(fmt::format("cannot allocate {} bytes of kernel scratch memory", n));
        scratch_.reset(p);
        scratch_bytes_ = n;
    }
    return scratch_.get();
}

void HostStream::launch(kiln_host_entry entry, const void* args, size_t size, std::string kernel_name,
                        uint64_t scratch_bytes) {
    if (entry == nullptr) throw InvalidArgument(fmt::format("host kernel {}: null entry point", kernel_name));
    std::vector<unsigned char> copy(size);
    if (size != 0) std::memcpy(copy.data(), args, size);
    std::string name = kernel_name;
    push(Item{[this, entry, scratch_bytes, copy = std::move(copy), name = std::move(name)] {
                  int32_t status = 0;
                  kiln_host_ctx ctx = pool_.abi_context();
                  ctx.status = &status;
                  ctx.scratch = scratch(scratch_bytes);
                  ctx.scratch_bytes = scratch_bytes;
                  entry(&ctx, copy.empty() ? nullptr : copy.data());
                  if (status == 1)
                      throw HostExecutionError(fmt::format(
                          "host kernel {} refused to run: built for another kernel ABI version than this kiln ({})",
                          name, KILN_HOST_ABI_VERSION));
                  if (status != 0)
                      throw HostExecutionError(fmt::format("host kernel {} refused to run (status {}{})", name,
                                                           status, status == 2 ? ": scratch buffer too small" : ""));
              },
              "host kernel " + kernel_name, false});
}

void HostStream::record(HostEvent& ev) {
    auto st = ev.st_;
    uint64_t g;
    {
        std::lock_guard lk(st->mu);
        g = ++st->recorded;
    }
    push(Item{[st, g] {
                  {
                      std::lock_guard lk(st->mu);
                      if (g > st->completed) {
                          st->completed = g;
                          st->when = std::chrono::steady_clock::now();
                      }
                  }
                  st->cv.notify_all();
              },
              "event record", true});
}

void HostStream::wait(const HostEvent& ev) {
    auto st = ev.st_;
    uint64_t g;
    {
        std::lock_guard lk(st->mu);
        g = st->recorded;
    }
    if (g == 0) return;
    // Waits are kept after an error too: work behind them is skipped anyway, and skipping the wait
    // would let a later event record on this stream complete too early.
    push(Item{[st, g] {
                  std::unique_lock lk(st->mu);
                  st->cv.wait(lk, [&] { return st->completed >= g; });
              },
              "event wait", true});
}

void HostStream::synchronize() {
    std::unique_lock lk(mu_);
    idle_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
    if (error_) std::rethrow_exception(error_);
}

bool HostStream::query() const {
    std::lock_guard lk(mu_);
    return queue_.empty() && !busy_;
}

void HostStream::loop() {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
        Item item = std::move(queue_.front());
        queue_.pop_front();
        bool skip = error_ && !item.always;
        busy_ = true;
        lk.unlock();
        std::exception_ptr err;
        if (!skip) {
            try {
                item.fn();
            } catch (const HostExecutionError&) {
                err = std::current_exception();
            } catch (const std::exception& e) {
                err = std::make_exception_ptr(HostExecutionError(fmt::format("{}: {}", item.what, e.what())));
            } catch (...) {
                err = std::make_exception_ptr(HostExecutionError(fmt::format("{}: unknown exception", item.what)));
            }
        }
        item.fn = nullptr;  // release captures outside the lock
        lk.lock();
        if (err && !error_) error_ = err;
        busy_ = false;
        if (queue_.empty()) idle_cv_.notify_all();
    }
}

}  // namespace kiln::runtime
