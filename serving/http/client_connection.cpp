#include "serving/http/client_connection.hpp"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdlib>

namespace kiln::serving::http {

namespace {

// The numeric host and port of an address, formatted as cpp-httplib formats them.
bool describe(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
    if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
    else if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
    else return false;
    char buf[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0)
        return false;
    host = buf;
    return true;
}

}  // namespace

ClientConnection ClientConnection::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                        int remote_port) {
    ClientConnection c;
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return c;
    while (dirent* ent = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(ent->d_name, &end, 10);
        if (end == ent->d_name || *end != '\0' || fd == dirfd(dir)) continue;
        struct stat st;
        if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage peer{}, self{};
        socklen_t plen = sizeof peer, slen = sizeof self;
        if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
        std::string host;
        int port = -1;
        if (!describe(peer, plen, host, port) || port != remote_port || host != remote_addr) continue;
        if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&self), &slen) != 0) continue;
        if (!describe(self, slen, host, port) || port != local_port || host != local_addr) continue;
        c.fd_ = int(fd);
        break;
    }
    closedir(dir);
    return c;
}

bool ClientConnection::closed() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

WaitResult wait_for_wake_or_close(int wake_fd, const ClientConnection& conn, int timeout_ms) {
    pollfd p[2] = {{wake_fd, POLLIN, 0}, {conn.fd(), POLLRDHUP, 0}};
    const nfds_t n = conn.known() ? 2 : 1;
    int r;
    do {
        r = ::poll(p, n, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) return WaitResult::timeout;
    if (n == 2 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return WaitResult::closed;
    return (p[0].revents & POLLIN) ? WaitResult::woken : WaitResult::timeout;
}

}  // namespace kiln::serving::http
