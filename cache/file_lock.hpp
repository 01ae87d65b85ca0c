// Exclusive advisory file locks (flock) with a timeout, used for per-key compile leases and for
// recovering a damaged DB. The kernel drops a flock when its holder dies, so a killed process
// never leaves a stuck lock. Lock files are removed on release; acquisition re-checks that the
// locked file is still the one at the path, so removal cannot let two holders in.
#pragma once

#include <chrono>
#include <string>

namespace kiln::cache {

class FileLock {
public:
    FileLock() = default;
    FileLock(FileLock&&) noexcept;
    FileLock& operator=(FileLock&&) noexcept;
    ~FileLock();

    // Creates the parent directory if needed. Returns an unheld lock on timeout; throws IoError
    // when the lock file cannot be created.
    static FileLock acquire(const std::string& path, std::chrono::milliseconds timeout);

    bool held() const { return fd_ >= 0; }
    const std::string& path() const { return path_; }
    void release();
    // Gives up ownership of the descriptor (the caller releases it with release_fd()).
    int detach(std::string& path);
    static void release_fd(int fd, const std::string& path);

private:
    int fd_ = -1;
    std::string path_;
};

}  // namespace kiln::cache
