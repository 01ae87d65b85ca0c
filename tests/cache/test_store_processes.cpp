// Cross-process single flight: processes that miss the same key take the lease, re-check, and only
// one of them compiles. Leases time out with a clear error and die with their process; a stopped
// holder loses its lease, a live one renews it.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "cache/compile_lease.hpp"
#include "cache/store.hpp"
#include "cache_test_util.hpp"
#include "tests/common/lease_holder.hpp"
#include "runtime/error.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;
using kiln::test::LeaseHolder;

namespace {

// The "compiler": deterministic output, and every call appends one byte to a counter file.
Artifact compile_counted(const std::string& counter_file) {
    int fd = ::open(counter_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        (void)!::write(fd, "c", 1);
        ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // widen the race window
    return make_artifact(4242, 100000);
}

// Child body: returns the exit status (0 = served the right artifact).
int child_main(const StoreOptions& opts, int barrier_fd, const std::string& counter_file) {
    char c;
    (void)!::read(barrier_fd, &c, 1);  // blocks until the parent closes the write end
    try {
        const Artifact want = make_artifact(4242, 100000);
        Store store(opts);
        std::optional<Artifact> got = store.get(want.info.key, ArtifactKind::cubin);
        if (!got) {
            Store::Lease lease = store.lease(want.info.key, std::chrono::seconds(60));
            if (!lease.held()) return 3;
            got = store.get(want.info.key, ArtifactKind::cubin);
            if (!got) {
                Artifact a = compile_counted(counter_file);
                if (!store.put(a)) return 4;
                got = store.get(want.info.key, ArtifactKind::cubin);
            }
        }
        if (!got || got->blob != want.blob) return 5;
        return 0;
    } catch (...) {
        return 6;
    }
}

void run_processes(int nproc) {
    TempDir dir;
    StoreOptions opts = options_in(dir);
    std::string counter = dir / "compiles";
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    std::vector<pid_t> kids;
    for (int i = 0; i < nproc; ++i) {
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(pipefd[1]);
            ::_exit(child_main(opts, pipefd[0], counter));
        }
        kids.push_back(pid);
    }
    ::close(pipefd[0]);
    ::close(pipefd[1]);  // release every child at once
    for (pid_t pid : kids) {
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
    CHECK(slurp(counter).size() == 1);  // exactly one compile
    Store store(opts);
    auto rows = store.list();
    CHECK(rows.size() == 1);  // exactly one row
    CHECK(fs::is_empty(dir.path / "user" / "locks"));  // lock files are removed on release
}

}  // namespace

TEST_CASE("two processes missing the same key compile it once and store one row") { run_processes(2); }

TEST_CASE("six processes missing the same key compile it once and store one row") { run_processes(6); }

TEST_CASE("a held lease times out with an error naming the key and lock file, and dies with its process") {
    TempDir dir;
    StoreOptions opts = options_in(dir);
    ContentKey key = make_artifact(77).info.key;
    LeaseHolder holder(opts, key);
    {
        Store store(opts);
        try {
            (void)store.lease(key, std::chrono::milliseconds(200));
            FAIL("lease should have timed out");
        } catch (const CacheError& e) {
            std::string what = e.what();
            CHECK(what.find(key.hex()) != std::string::npos);
            CHECK(what.find("locks/" + key.hex() + ".lock") != std::string::npos);
        }
    }
    CHECK(holder.kill_now());  // dies holding the lease: no destructor runs
    Store store(opts);
    Store::Lease lease = store.lease(key, std::chrono::seconds(2));
    CHECK(lease.held());
}

TEST_CASE("leases are exclusive between threads of one process and movable") {
    TempDir dir;
    Store store(options_in(dir));
    ContentKey key = make_artifact(78).info.key;
    Store::Lease first = store.lease(key, std::chrono::seconds(1));
    REQUIRE(first.held());
    std::atomic<bool> timed_out{false};
    std::thread t([&] {
        try {
            (void)store.lease(key, std::chrono::milliseconds(100));
        } catch (const CacheError&) {
            timed_out = true;
        }
    });
    t.join();
    CHECK(timed_out);
    Store::Lease moved = std::move(first);
    CHECK(moved.held());
    CHECK_FALSE(first.held());
    moved = Store::Lease();  // releases
    Store::Lease again = store.lease(key, std::chrono::milliseconds(100));
    CHECK(again.held());
}

namespace {

std::string file_text(const fs::path& p) { return slurp(p.string()); }

}  // namespace

TEST_CASE("a stopped holder loses its lease: the waiter reports key and pid, takes over, and keeps it") {
    TempDir dir;
    StoreOptions opts = options_in(dir);
    opts.lease_stale_after = std::chrono::seconds(4);  // past the waiter's first report (3 s)
    const ContentKey key = make_artifact(79).info.key;
    const fs::path lock = dir.path / "user" / "locks" / (key.hex() + ".lock");
    LeaseHolder holder(opts, key);
    CHECK(file_text(lock) == std::to_string(holder.pid) + "\n");  // the holder names itself
    REQUIRE(::kill(holder.pid, SIGSTOP) == 0);

    Store store(opts);
    const auto t0 = std::chrono::steady_clock::now();
    Store::Lease lease = store.lease(key, std::chrono::seconds(60));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(lease.held());
    CHECK(waited > 3.0);
    CHECK(waited < 30.0);
    const std::string pid = std::to_string(holder.pid);
    CHECK(contains(store.warnings(), "waiting for the compile lease on key " + key.hex() + ": pid " + pid + " (stopped)"));
    CHECK(contains(store.warnings(), "taking it over"));
    CHECK(file_text(lock) == std::to_string(::getpid()) + "\n");

    // The old holder resumes and releases: it leaves the new holder's lock file alone, and the new
    // lease stays exclusive.
    REQUIRE(::kill(holder.pid, SIGCONT) == 0);
    CHECK(holder.finish() == 0);
    CHECK(fs::exists(lock));
    Store other(opts);
    CHECK_THROWS_AS((void)other.lease(key, std::chrono::milliseconds(300)), CacheError);
    lease = Store::Lease();
    CHECK_FALSE(fs::exists(lock));
}

TEST_CASE("a live holder renews its lease: waiters keep waiting past the stale time") {
    TempDir dir;
    StoreOptions opts = options_in(dir);
    opts.lease_stale_after = std::chrono::seconds(1);
    const ContentKey key = make_artifact(80).info.key;
    LeaseHolder holder(opts, key);
    Store store(opts);
    // Three times the stale time: a holder that renews is never taken over.
    CHECK_THROWS_AS((void)store.lease(key, std::chrono::seconds(3)), CacheError);
    CHECK_FALSE(contains(store.warnings(), "taking it over"));
    CHECK(holder.finish() == 0);
    CHECK(store.lease(key, std::chrono::seconds(2)).held());
}

TEST_CASE("KILN_JIT_LEASE_TIMEOUT sets the stale time, in seconds") {
    setenv("KILN_JIT_LEASE_TIMEOUT", "2.5", 1);
    CHECK(kiln::cache::lease_stale_after_from_env() == std::chrono::milliseconds(2500));
    for (const char* bad : {"0", "-3", "abc", "1e9", "nan"}) {
        setenv("KILN_JIT_LEASE_TIMEOUT", bad, 1);
        CHECK_THROWS_AS(kiln::cache::lease_stale_after_from_env(), kiln::InvalidArgument);
    }
    unsetenv("KILN_JIT_LEASE_TIMEOUT");
    CHECK(kiln::cache::lease_stale_after_from_env() == std::chrono::seconds(30));
}

TEST_CASE("lock files left by killed processes are removed when a store opens; held ones stay") {
    TempDir dir;
    StoreOptions opts = options_in(dir);
    const ContentKey dead_key = make_artifact(81).info.key, live_key = make_artifact(82).info.key;
    const fs::path locks = dir.path / "user" / "locks";
    {
        LeaseHolder killed(opts, dead_key);
        REQUIRE(killed.kill_now());  // dies holding the lease: its lock file stays behind
    }
    REQUIRE(fs::exists(locks / (dead_key.hex() + ".lock")));
    LeaseHolder live(opts, live_key);
    Store store(opts);
    CHECK_FALSE(fs::exists(locks / (dead_key.hex() + ".lock")));
    CHECK(fs::exists(locks / (live_key.hex() + ".lock")));
    CHECK_THROWS_AS((void)store.lease(live_key, std::chrono::milliseconds(200)), CacheError);
    CHECK(live.finish() == 0);
    CHECK(fs::is_empty(locks));
}
