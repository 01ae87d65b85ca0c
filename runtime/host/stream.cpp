#include "runtime/host/stream.hpp"

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

double HostEvent::elapsed_ms_since(const Event& start) const {
    if (start.kind() != BackendKind::host) throw InvalidArgument("elapsed time between events of two backends");
    return elapsed_ms(static_cast<const HostEvent&>(start), *this);
}

HostStream::HostStream(HostBackend& backend) : backend_(backend), thread_([this] { loop(); }) {}

Backend& HostStream::backend() const { return backend_; }
HostThreadPool& HostStream::pool() const { return backend_.pool(); }

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

void HostStream::launch(const KernelHandle& k, const LaunchDims&, const void* params, size_t size) {
    if (k.kind != BackendKind::host || k.host == nullptr)
        throw InvalidArgument(fmt::format("launch on a host stream: kernel {} is not a host kernel", k.name));
    std::vector<unsigned char> copy(size);
    if (size != 0) std::memcpy(copy.data(), params, size);
    std::string kernel_name = k.name;
    const kiln_host_entry entry = k.host;
    const uint64_t scratch_bytes = k.host_scratch_bytes;
    push(Item{[this, entry, scratch_bytes, copy = std::move(copy), name = kernel_name] {
                  int32_t status = 0;
                  kiln_host_ctx ctx = pool().abi_context();
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

void HostStream::copy(uint64_t dst, uint64_t src, size_t bytes) {
    if (bytes) enqueue([=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes); }, "copy");
}
void HostStream::upload(uint64_t dst, const void* src, size_t bytes) {
    if (bytes) enqueue([=] { std::memcpy(reinterpret_cast<void*>(dst), src, bytes); }, "upload");
}
void HostStream::download(void* dst, uint64_t src, size_t bytes) {
    if (bytes) enqueue([=] { std::memcpy(dst, reinterpret_cast<const void*>(src), bytes); }, "download");
}
void HostStream::fill_u8(uint64_t dst, uint8_t value, size_t count) {
    if (count) enqueue([=] { std::memset(reinterpret_cast<void*>(dst), value, count); }, "fill");
}
void HostStream::fill_u32(uint64_t dst, uint32_t value, size_t count) {
    if (count)
        enqueue([=] {
            uint32_t* p = reinterpret_cast<uint32_t*>(dst);
            for (size_t i = 0; i < count; ++i) p[i] = value;
        }, "fill");
}

static HostEvent& as_host(Event& e) {
    if (e.kind() != BackendKind::host) throw InvalidArgument("a host stream was given an event of the CUDA backend");
    return static_cast<HostEvent&>(e);
}

void HostStream::record(Event& event) {
    HostEvent& ev = as_host(event);
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

void HostStream::wait(const Event& event) {
    const HostEvent& ev = as_host(const_cast<Event&>(event));
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

std::string HostBackend::name() const { return fmt::format("host ({} threads)", pool_.threads()); }

Buffer HostBackend::alloc(size_t bytes) {
    if (bytes == 0) return {};
    const size_t n = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n);
    if (p == nullptr) throw HostExecutionError(fmt::format("cannot allocate {} bytes of host memory", bytes));
    return Buffer(this, reinterpret_cast<uint64_t>(p), bytes);
}

void HostBackend::free(uint64_t addr, size_t) noexcept { std::free(reinterpret_cast<void*>(addr)); }

std::unique_ptr<Stream> HostBackend::create_stream() { return std::make_unique<HostStream>(*this); }
std::unique_ptr<Event> HostBackend::create_event(bool) { return std::make_unique<HostEvent>(); }

void HostBackend::upload(uint64_t dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
}
void HostBackend::download(void* dst, uint64_t src, size_t bytes) {
    if (bytes) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
}

}  // namespace kiln::runtime
