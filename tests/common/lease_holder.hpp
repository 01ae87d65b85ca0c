// Another process holding a compile lease: a forked child that opens its own cache::Store, takes the
// lease on a key and holds it until told to let go, so tests can stop it (SIGSTOP), kill it, or have
// it release, while they (or a kiln they run) wait for that lease.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <doctest/doctest.h>

#include "cache/store.hpp"

namespace kiln::test {

class LeaseHolder {
public:
    // Returns once the child holds the lease.
    LeaseHolder(const cache::StoreOptions& opts, const cache::ContentKey& key) {
        REQUIRE(::pipe(ready_) == 0);
        REQUIRE(::pipe(go_) == 0);
        pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(ready_[0]);
            ::close(go_[1]);
            try {
                cache::Store store(opts);
                cache::Store::Lease lease = store.lease(key, std::chrono::seconds(5));
                (void)!::write(ready_[1], lease.held() ? "y" : "n", 1);
                char c;
                while (::read(go_[0], &c, 1) < 0 && errno == EINTR) {
                }
            } catch (...) {
                ::_exit(3);
            }
            ::_exit(0);
        }
        ::close(ready_[1]);
        ::close(go_[0]);
        char c = 0;
        REQUIRE(::read(ready_[0], &c, 1) == 1);
        REQUIRE(c == 'y');
    }
    ~LeaseHolder() {
        if (pid > 0) kill_now();
        ::close(ready_[0]);
        ::close(go_[1]);
    }
    LeaseHolder(const LeaseHolder&) = delete;
    LeaseHolder& operator=(const LeaseHolder&) = delete;

    // Lets the child release the lease and exit; returns its exit status.
    int finish() {
        (void)!::write(go_[1], "x", 1);
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    // SIGKILL while it holds the lease (stopped or not); true when it died of it.
    bool kill_now() {
        ::kill(pid, SIGKILL);
        int status = 0;
        const bool reaped = ::waitpid(pid, &status, 0) == pid;
        pid = -1;
        return reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    }

    pid_t pid = -1;

private:
    int ready_[2] = {-1, -1}, go_[2] = {-1, -1};
};

}  // namespace kiln::test
