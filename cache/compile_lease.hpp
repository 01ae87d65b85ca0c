// The cross-process compile lease behind Store::lease: an exclusive flock on <cache>/locks/<key>.lock
// (cache/file_lock.hpp), plus what keeps a stopped or hung holder from blocking everyone else.
//
// The holder writes its pid into the lock file and renews the file's modification time every quarter
// of `stale_after` from a thread of its own, however long its compile runs. A waiter reports, after
// `report_after`, which key it waits for and which pid holds it (and whether that process is stopped);
// when the file has not been renewed for `stale_after`, the holder has stopped or hung: the waiter
// removes the lock file, says so, and competes for a fresh one, so at worst the kernel is compiled
// twice (stores are INSERT OR IGNORE). A holder that was taken over and resumes leaves the new file
// alone when it releases.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cache/file_lock.hpp"

namespace kiln::cache {

struct LeaseTiming {
    std::chrono::milliseconds wait{std::chrono::minutes(10)};          // give up (unheld lease) after this
    std::chrono::milliseconds stale_after{std::chrono::seconds(30)};   // an unrenewed holder loses the lease
    std::chrono::milliseconds report_after{std::chrono::seconds(3)};   // when a waiter first says what it waits for
};

class CompileLease {
public:
    // Held, or unheld after `timing.wait`. `what` names the lease in messages (the key); `report`
    // receives the waiter's messages. Throws IoError when the lock file cannot be created.
    static std::unique_ptr<CompileLease> acquire(const std::string& path, const std::string& what,
                                                 const LeaseTiming& timing,
                                                 const std::function<void(const std::string&)>& report);
    ~CompileLease();  // stops renewing, releases the lock
    CompileLease(const CompileLease&) = delete;
    CompileLease& operator=(const CompileLease&) = delete;

    bool held() const { return lock_.held(); }
    const std::string& path() const { return lock_.path(); }

private:
    CompileLease(FileLock lock, std::chrono::milliseconds renew_every);
    void renew_loop(std::chrono::milliseconds every);

    FileLock lock_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread renewer_;
};

// KILN_JIT_LEASE_TIMEOUT (seconds, 1 to 86400; fractions allowed), else 30 s. InvalidArgument on junk.
std::chrono::milliseconds lease_stale_after_from_env();

}  // namespace kiln::cache
