#include "cache/compile_lease.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace kiln::cache {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// How long ago the file behind `fd` was last modified (renewed), by the wall clock file times use.
std::chrono::nanoseconds age_of(const struct stat& st) {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return std::chrono::seconds(now.tv_sec - st.st_mtim.tv_sec) + std::chrono::nanoseconds(now.tv_nsec - st.st_mtim.tv_nsec);
}

// The pid the holder wrote into the lock file, or 0.
long holder_pid(int fd) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    char* end = nullptr;
    long pid = std::strtol(buf, &end, 10);
    return end != buf && pid > 0 ? pid : 0;
}

// "pid 1234", "pid 1234 (stopped)", or "an unknown process" (no pid written yet).
std::string describe_holder(long pid) {
    if (pid <= 0) return "an unknown process";
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string stat;
    std::getline(in, stat);
    // "pid (comm) S ...": the state follows the last ')'.
    size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size()) {
        const char state = stat[close + 2];
        if (state == 'T' || state == 't') return fmt::format("pid {} (stopped)", pid);
    } else if (stat.empty()) {
        return fmt::format("pid {} (no longer running here)", pid);
    }
    return fmt::format("pid {}", pid);
}

}  // namespace

std::chrono::milliseconds lease_stale_after_from_env() {
    auto v = env::get("KILN_JIT_LEASE_TIMEOUT");
    if (!v) return std::chrono::seconds(30);
    char* end = nullptr;
    const double s = std::strtod(v->c_str(), &end);
    if (end == v->c_str() || *end != '\0' || !std::isfinite(s) || s < 1 || s > 86400)
        throw InvalidArgument(fmt::format("KILN_JIT_LEASE_TIMEOUT={}: expected seconds from 1 to 86400", *v));
    return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000)));
}

std::unique_ptr<CompileLease> CompileLease::acquire(const std::string& path, const std::string& what,
                                                    const LeaseTiming& timing,
                                                    const std::function<void(const std::string&)>& report) {
    const auto start = Clock::now();
    bool reported = false;
    auto while_busy = [&](int fd) {
        struct stat st {};
        if (::fstat(fd, &st) != 0) return false;
        const auto waited = Clock::now() - start;
        const auto age = age_of(st);
        if (age > timing.stale_after) {
            struct stat now {};
            // Remove the file only while the path still names the one judged stale.
            if (::stat(path.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
                ::unlink(path.c_str());
                report(fmt::format("the compile lease on key {} was not renewed for {:.1f} s by its holder, {} "
                                   "(KILN_JIT_LEASE_TIMEOUT {:.0f} s); taking it over ({})",
                                   what, seconds(age), describe_holder(holder_pid(fd)), seconds(timing.stale_after),
                                   path));
            }
            return true;
        }
        if (!reported && waited >= timing.report_after) {
            reported = true;
            report(fmt::format("waiting for the compile lease on key {}: {} is compiling it ({}); a holder that stops "
                               "renewing it loses it after {:.0f} s (KILN_JIT_LEASE_TIMEOUT)",
                               what, describe_holder(holder_pid(fd)), path, seconds(timing.stale_after)));
        }
        return false;
    };
    FileLock lock = FileLock::acquire(path, timing.wait, while_busy);
    if (!lock.held()) return nullptr;
    const std::string pid = fmt::format("{}\n", ::getpid());
    // Best effort: without it waiters report "an unknown process"; the lease itself is unaffected.
    if (::ftruncate(lock.fd(), 0) == 0) (void)!::pwrite(lock.fd(), pid.data(), pid.size(), 0);
    const auto every = std::clamp<std::chrono::milliseconds>(timing.stale_after / 4, std::chrono::milliseconds(50),
                                                             std::chrono::seconds(5));
    return std::unique_ptr<CompileLease>(new CompileLease(std::move(lock), every));
}

CompileLease::CompileLease(FileLock lock, std::chrono::milliseconds renew_every) : lock_(std::move(lock)) {
    renewer_ = std::thread([this, renew_every] { renew_loop(renew_every); });
}

CompileLease::~CompileLease() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    renewer_.join();
    lock_.release();
}

void CompileLease::renew_loop(std::chrono::milliseconds every) {
    std::unique_lock<std::mutex> g(mu_);
    while (!cv_.wait_for(g, every, [this] { return stop_; })) ::futimens(lock_.fd(), nullptr);
}

}  // namespace kiln::cache
