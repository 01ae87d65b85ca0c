#include "cache/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::cache {

FileLock::FileLock(FileLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

FileLock& FileLock::operator=(FileLock&& o) noexcept {
    if (this != &o) {
        release();
        fd_ = o.fd_;
        path_ = std::move(o.path_);
        o.fd_ = -1;
    }
    return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::release() {
    if (fd_ < 0) return;
    // Unlink while still holding the lock: a waiter that then gets the lock sees that the path
    // no longer names its file and starts over with a fresh one. A path that names another file
    // (a waiter took over a lease this process held too long) is not ours to remove.
    struct stat held {}, now {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
        ::unlink(path_.c_str());
    ::close(fd_);
    fd_ = -1;
}

size_t FileLock::remove_unheld(const std::string& dir, const std::string& suffix) {
    size_t removed = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string path = it->path().string();
        if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
        int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            FileLock l;  // held now: released (and so removed) as any holder's would be
            l.fd_ = fd;
            l.path_ = path;
            l.release();
            ++removed;
        } else {
            ::close(fd);
        }
    }
    return removed;
}

FileLock FileLock::acquire(const std::string& path, std::chrono::milliseconds timeout,
                           const std::function<bool(int fd)>& while_busy) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(500);
    for (;;) {
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) throw IoError(fmt::format("{}: cannot create lock file: {}", path, std::strerror(errno)));
        bool restart = false;
        for (;;) {
            if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
            if (errno != EWOULDBLOCK && errno != EINTR) {
                int err = errno;
                ::close(fd);
                throw IoError(fmt::format("{}: flock failed: {}", path, std::strerror(err)));
            }
            if (std::chrono::steady_clock::now() >= deadline) {
                ::close(fd);
                return FileLock();
            }
            if (while_busy && while_busy(fd)) {
                restart = true;
                break;
            }
            std::this_thread::sleep_for(pause);
            pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
        }
        if (restart) {
            ::close(fd);
            continue;
        }
        struct stat held {}, now {};
        if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
            held.st_ino == now.st_ino) {
            FileLock l;
            l.fd_ = fd;
            l.path_ = path;
            return l;
        }
        ::close(fd);  // the previous holder removed this file: lock the new one
    }
}

}  // namespace kiln::cache
