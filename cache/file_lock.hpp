// Exclusive advisory file locks (flock) with a timeout, used for per-key compile leases and for
// recovering a damaged DB. The kernel drops a flock when its holder dies, so a killed process
// never leaves a stuck lock. Lock files are removed on release (when the path still names the
// holder's file); acquisition re-checks that the locked file is still the one at the path, so
// removal cannot let two holders in.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace kiln::cache {

class FileLock {
public:
    FileLock() = default;
    FileLock(FileLock&&) noexcept;
    FileLock& operator=(FileLock&&) noexcept;
    ~FileLock();

    // Creates the parent directory if needed. Returns an unheld lock on timeout; throws IoError
    // when the lock file cannot be created. While another process holds the lock, `while_busy`
    // (when given) is called between attempts with the descriptor of the lock file; when it returns
    // true (it removed a stale file), acquisition starts over with the file the path names then.
    static FileLock acquire(const std::string& path, std::chrono::milliseconds timeout,
                            const std::function<bool(int fd)>& while_busy = {});

    // Removes the lock files in `dir` ending in `suffix` that no process holds: those of processes
    // killed while holding them (the kernel dropped the lock, the file stayed). Safe against
    // concurrent holders, like release(). Returns how many went.
    static size_t remove_unheld(const std::string& dir, const std::string& suffix);

    bool held() const { return fd_ >= 0; }
    int fd() const { return fd_; }
    const std::string& path() const { return path_; }
    void release();

private:
    int fd_ = -1;
    std::string path_;
};

}  // namespace kiln::cache
