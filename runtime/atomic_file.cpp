#include "runtime/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln {

namespace fs = std::filesystem;

size_t remove_stale_temp_siblings(const std::string& path) {
    const fs::path p(path);
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    const std::string prefix = "." + p.filename().string() + ".tmp-";
    size_t removed = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind(prefix, 0) != 0) continue;
        // .<name>.tmp-<pid>-<16 hex digits>[-journal|-wal|-shm]
        const char* digits = name.c_str() + prefix.size();
        char* after = nullptr;
        const long pid = std::strtol(digits, &after, 10);
        if (after == digits || *after != '-' || pid <= 0) continue;
        if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive
        std::error_code rm;
        if (fs::remove(it->path(), rm)) ++removed;
    }
    return removed;
}

std::string temp_sibling(const std::string& path) {
    remove_stale_temp_siblings(path);
    fs::path p(path);
    std::random_device rd;
    uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    std::string name = fmt::format(".{}.tmp-{}-{:016x}", p.filename().string(), getpid(), r);
    return (p.parent_path() / name).string();
}

void fsync_path(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw IoError(fmt::format("{}: cannot open for fsync: {}", path, std::strerror(errno)));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    // Some filesystems refuse fsync on directories (EINVAL); the rename is still atomic there.
    if (rc != 0 && err != EINVAL) throw IoError(fmt::format("{}: fsync failed: {}", path, std::strerror(err)));
}

void publish_file(const std::string& tmp, const std::string& path) {
    fsync_path(tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw IoError(fmt::format("{}: cannot rename into place: {}", path, std::strerror(err)));
    }
    fs::path dir = fs::path(path).parent_path();
    fsync_path(dir.empty() ? std::string(".") : dir.string());
}

void write_file_atomic(const std::string& path, std::string_view bytes, unsigned mode) {
    std::string tmp = temp_sibling(path);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) throw IoError(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw IoError(fmt::format("{}: write failed: {}", path, std::strerror(err)));
        }
        off += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw IoError(fmt::format("{}: write failed: {}", path, std::strerror(err)));
    }
    publish_file(tmp, path);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw IoError(fmt::format("{}: read failed", path));
    return ss.str();
}

}  // namespace kiln
