// Client-disconnect detection on real TCP sockets: the accepted socket is found by its address pair,
// a waiting request wakes on an event or on the peer closing (not on pipelined data), and the event
// queue the engine feeds keeps order and wakes its reader.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "serving/http/client_connection.hpp"
#include "serving/http/generation.hpp"

using namespace kiln::serving;
using namespace kiln::serving::http;

namespace {

struct Pair {
    int listener = -1, client = -1, accepted = -1;
    std::string local_addr, remote_addr;
    int local_port = -1, remote_port = -1;

    Pair() {
        listener = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        REQUIRE(::listen(listener, 4) == 0);
        socklen_t len = sizeof a;
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
        client = ::socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        sockaddr_in peer{};
        len = sizeof peer;
        accepted = ::accept(listener, reinterpret_cast<sockaddr*>(&peer), &len);
        REQUIRE(accepted >= 0);
        char host[NI_MAXHOST];
        getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
        remote_addr = host;
        remote_port = ntohs(peer.sin_port);
        local_addr = "127.0.0.1";
        local_port = ntohs(a.sin_port);
    }
    ~Pair() {
        for (int fd : {listener, client, accepted})
            if (fd >= 0) ::close(fd);
    }
};

}  // namespace

TEST_CASE("the accepted socket is found by its address pair") {
    Pair p;
    Pair other;  // a second connection on another port must not be confused with the first
    const ClientConnection c = ClientConnection::find(p.local_addr, p.local_port, p.remote_addr, p.remote_port);
    CHECK(c.fd() == p.accepted);
    CHECK(ClientConnection::find(other.local_addr, other.local_port, other.remote_addr, other.remote_port).fd() ==
          other.accepted);
    CHECK_FALSE(ClientConnection::find(p.local_addr, p.local_port, p.remote_addr, p.remote_port + 1).known());
    CHECK_FALSE(ClientConnection::find("10.9.8.7", p.local_port, p.remote_addr, p.remote_port).known());
    CHECK_FALSE(ClientConnection().closed());
}

TEST_CASE("pipelined data is not a disconnect; closing is, at once") {
    Pair p;
    const ClientConnection c = ClientConnection::find(p.local_addr, p.local_port, p.remote_addr, p.remote_port);
    REQUIRE(c.known());
    EventQueue q;
    CHECK_FALSE(c.closed());
    CHECK(wait_for_wake_or_close(q.wake_fd(), c, 50) == WaitResult::timeout);
    const char more[] = "GET /next HTTP/1.1\r\n\r\n";
    REQUIRE(::send(p.client, more, sizeof more - 1, 0) > 0);
    CHECK_FALSE(c.closed());
    CHECK(wait_for_wake_or_close(q.wake_fd(), c, 50) == WaitResult::timeout);

    std::thread closer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ::close(p.client);
        p.client = -1;
    });
    const auto t0 = std::chrono::steady_clock::now();
    const WaitResult r = wait_for_wake_or_close(q.wake_fd(), c, 10000);
    const auto waited = std::chrono::steady_clock::now() - t0;
    closer.join();
    CHECK(r == WaitResult::closed);
    CHECK(waited < std::chrono::seconds(5));  // woken by the close, not the timeout
    CHECK(c.closed());
}

TEST_CASE("the event queue wakes its reader and keeps the engine's order") {
    EventQueue q;
    const ClientConnection none;
    CHECK(wait_for_wake_or_close(q.wake_fd(), none, 20) == WaitResult::timeout);
    CHECK(q.take().empty());
    std::thread engine([&] {
        for (uint32_t i = 0; i < 100; ++i) {
            GenerationEvent e;
            e.index = i % 2;
            e.tokens = {i};
            q.push(i % 3, std::move(e));
        }
    });
    std::vector<EventQueue::Item> got;
    while (got.size() < 100) {
        if (wait_for_wake_or_close(q.wake_fd(), none, 5000) != WaitResult::woken) break;
        for (auto& it : q.take()) got.push_back(std::move(it));
    }
    engine.join();
    REQUIRE(got.size() == 100);
    for (uint32_t i = 0; i < 100; ++i) {
        CHECK(got[i].event.tokens.at(0) == i);
        CHECK(got[i].prompt == i % 3);
        CHECK(got[i].event.index == i % 2);
        if (i) CHECK(got[i].at >= got[i - 1].at);
    }
    // A push's wake-up may land after the take that already returned its event (a spurious wake-up the
    // reader sees as an empty take); once everything is taken, the wake-up is cleared.
    CHECK(q.take().empty());
    CHECK(wait_for_wake_or_close(q.wake_fd(), none, 20) == WaitResult::timeout);
    q.wake();
    CHECK(wait_for_wake_or_close(q.wake_fd(), none, 20) == WaitResult::woken);
    CHECK(q.take().empty());
}
