// The client's TCP connection, watched while its request waits on the engine, so that a client that
// goes away cancels its request at once rather than at the next write.
//
// cpp-httplib 0.11 gives handlers neither the socket nor a "connection closed" query, so the socket
// is looked up by its address pair among the process's descriptors: a connection's (local, remote)
// address pair is unique while it is open. Without a match, only failed writes reveal the loss.
#pragma once

#include <string>

namespace kiln::serving::http {

class ClientConnection {
public:
    ClientConnection() = default;
    // Addresses as cpp-httplib reports them (numeric host, port).
    static ClientConnection find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                 int remote_port);

    int fd() const { return fd_; }
    bool known() const { return fd_ >= 0; }
    // The peer closed or reset the connection (pipelined data waiting to be read does not count).
    bool closed() const;

private:
    int fd_ = -1;
};

enum class WaitResult { woken, closed, timeout };

// Blocks until `wake_fd` is readable, the connection closes, or `timeout_ms` passes.
WaitResult wait_for_wake_or_close(int wake_fd, const ClientConnection& conn, int timeout_ms);

}  // namespace kiln::serving::http
