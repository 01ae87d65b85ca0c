#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/host/stream.hpp"
#include "runtime/host/thread_pool.hpp"

using namespace kiln::runtime;

namespace {

// Blocks a stream until the test opens it, so ordering can be observed without timing.
struct Gate {
    std::promise<void> p;
    std::shared_future<void> f = p.get_future().share();
    void open() { p.set_value(); }
    std::function<void()> wait_fn() {
        auto fut = f;
        return [fut] { fut.wait(); };
    }
};

}  // namespace

TEST_CASE("parallel_for covers every index exactly once") {
    HostThreadPool pool(4);
    CHECK(pool.threads() == 4);
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
        for (int64_t grain : {0, 1, 3, 64, 5000}) {
            std::vector<std::atomic<int>> hits(n);
            pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
                REQUIRE(b < e);
                for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
            });
            for (int64_t i = 0; i < n; ++i) REQUIRE(hits[i].load() == 1);
        }
    }
    pool.parallel_for(0, 0, [&](int64_t, int64_t) { FAIL("empty range must not run"); });
}

TEST_CASE("parallel_for uses several threads, nests inline and rethrows") {
    HostThreadPool pool(4);
    // Several threads take part: chunks wait for each other until four have started at once.
    std::atomic<int> started{0};
    pool.parallel_for(4, 1, [&](int64_t, int64_t) {
        started.fetch_add(1);
        while (started.load() < 4) std::this_thread::yield();
    });
    CHECK(started.load() == 4);

    std::atomic<int64_t> sum{0};
    pool.parallel_for(8, 1, [&](int64_t b, int64_t) {
        pool.parallel_for(10, 1, [&](int64_t ib, int64_t ie) { sum.fetch_add((ie - ib) * (b + 1)); });
    });
    CHECK(sum.load() == 10 * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8));

    std::atomic<int> ran{0};
    CHECK_THROWS_AS(pool.parallel_for(16, 1,
                                      [&](int64_t b, int64_t) {
                                          ran.fetch_add(1);
                                          if (b == 5) throw std::runtime_error("chunk 5");
                                      }),
                    std::runtime_error);
    CHECK(ran.load() == 16);  // the other chunks still ran to completion
}

TEST_CASE("parallel loops from several threads at once") {
    HostThreadPool pool(3);
    std::vector<std::thread> ts;
    std::atomic<int64_t> total{0};
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&] {
            for (int r = 0; r < 50; ++r) {
                std::atomic<int64_t> local{0};
                pool.parallel_for(257, 0, [&](int64_t b, int64_t e) { local.fetch_add(e - b); });
                REQUIRE(local.load() == 257);
                total.fetch_add(local.load());
            }
        });
    for (auto& t : ts) t.join();
    CHECK(total.load() == 4 * 50 * 257);
}

TEST_CASE("a stream runs its work in order, one item at a time") {
    HostStream s;
    std::vector<int> order;
    std::atomic<int> running{0};
    bool overlap = false;
    for (int i = 0; i < 500; ++i)
        s.enqueue([&, i] {
            if (running.fetch_add(1) != 0) overlap = true;
            order.push_back(i);
            running.fetch_sub(1);
        });
    s.synchronize();
    CHECK(!overlap);
    REQUIRE(order.size() == 500);
    for (int i = 0; i < 500; ++i) CHECK(order[i] == i);
    CHECK(s.query());
}

TEST_CASE("enqueue returns at once; query and synchronize see pending work") {
    HostStream s;
    Gate g;
    std::atomic<bool> after{false};
    s.enqueue(g.wait_fn());
    s.enqueue([&] { after = true; });
    CHECK(!s.query());
    CHECK(!after.load());
    g.open();
    s.synchronize();
    CHECK(after.load());
    CHECK(s.query());
}

TEST_CASE("an event orders work across streams") {
    HostStream a, b;
    HostEvent ev;
    CHECK(ev.query());  // never recorded
    Gate g;
    std::atomic<int> seq{0};
    int a_done = -1, b_done = -1;
    a.enqueue(g.wait_fn());
    a.enqueue([&] { a_done = seq.fetch_add(1); });
    a.record(ev);
    b.wait(ev);
    b.enqueue([&] { b_done = seq.fetch_add(1); });
    CHECK(!ev.query());
    CHECK(!b.query());
    CHECK(b_done == -1);
    g.open();
    b.synchronize();
    CHECK(a_done == 0);
    CHECK(b_done == 1);
    ev.synchronize();
    CHECK(ev.query());
}

TEST_CASE("wait uses the most recent record at the time of the call") {
    HostStream a, b, c;
    HostEvent ev;
    HostStream idle;
    idle.record(ev);  // first record: completes at once
    idle.synchronize();
    Gate g;
    a.enqueue(g.wait_fn());
    a.record(ev);  // second record: blocked behind the gate
    std::atomic<bool> ran{false};
    b.wait(ev);
    b.enqueue([&] { ran = true; });
    // Waiting on a never-recorded event is a no-op.
    HostEvent never;
    std::atomic<bool> c_ran{false};
    c.wait(never);
    c.enqueue([&] { c_ran = true; });
    c.synchronize();
    CHECK(c_ran.load());
    CHECK(!ran.load());
    CHECK(!ev.query());
    g.open();
    b.synchronize();
    CHECK(ran.load());
}

TEST_CASE("elapsed time between events") {
    HostStream s;
    HostEvent start, stop, never;
    Gate g;
    s.record(start);
    s.enqueue(g.wait_fn());
    s.record(stop);
    CHECK_THROWS_AS(HostEvent::elapsed_ms(start, stop), HostExecutionError);  // stop not reached
    CHECK_THROWS_AS(HostEvent::elapsed_ms(start, never), HostExecutionError);
    g.open();
    s.synchronize();
    double ms = HostEvent::elapsed_ms(start, stop);
    CHECK(ms >= 0.0);
    CHECK(HostEvent::elapsed_ms(stop, start) == doctest::Approx(-ms));
}

TEST_CASE("errors are sticky and never hang other streams") {
    HostStream a, b;
    HostEvent ev;
    std::atomic<bool> skipped_ran{false}, b_ran{false};
    a.enqueue([] { throw std::runtime_error("boom"); }, "step 1");
    a.enqueue([&] { skipped_ran = true; });
    a.record(ev);
    b.wait(ev);
    b.enqueue([&] { b_ran = true; });
    b.synchronize();  // the record still completed
    CHECK(b_ran.load());
    CHECK(!skipped_ran.load());
    for (int i = 0; i < 2; ++i) {
        try {
            a.synchronize();
            FAIL("expected the stream error");
        } catch (const HostExecutionError& e) {
            CHECK(std::string(e.what()) == "step 1: boom");
        }
    }
}

TEST_CASE("destroying a stream waits for its work") {
    std::atomic<int> n{0};
    {
        HostStream s;
        for (int i = 0; i < 100; ++i) s.enqueue([&] { n.fetch_add(1); });
    }
    CHECK(n.load() == 100);
}

namespace {
struct FillArgs {
    int* out;
    int64_t n;
    int value;
};
struct FillClosure {
    const FillArgs* a;
};
extern "C" void fill_chunk(void* arg, int64_t b, int64_t e) {
    auto* c = static_cast<FillClosure*>(arg);
    for (int64_t i = b; i < e; ++i) c->a->out[i] = c->a->value + static_cast<int>(i);
}
// A kernel written against the C ABI only, as JIT-compiled kernels are.
extern "C" void fill_kernel(const kiln_host_ctx* ctx, const void* args) {
    if (ctx->abi_version != KILN_HOST_ABI_VERSION) {
        *ctx->status = 1;
        return;
    }
    FillClosure c{static_cast<const FillArgs*>(args)};
    ctx->parallel_for(ctx->pool, c.a->n, 0, &fill_chunk, &c);
}
extern "C" void refusing_kernel(const kiln_host_ctx* ctx, const void*) { *ctx->status = 3; }
// Uses its scratch buffer as a temporary, as the GEMV kernels do.
extern "C" void scratch_kernel(const kiln_host_ctx* ctx, const void* args) {
    const FillArgs* a = static_cast<const FillArgs*>(args);
    if (ctx->scratch_bytes < sizeof(int) * static_cast<uint64_t>(a->n)) {
        *ctx->status = 2;
        return;
    }
    int* tmp = static_cast<int*>(ctx->scratch);
    for (int64_t i = 0; i < a->n; ++i) tmp[i] = static_cast<int>(i) * a->value;
    for (int64_t i = 0; i < a->n; ++i) a->out[a->n - 1 - i] = tmp[i];
}
}  // namespace

TEST_CASE("host kernel launch copies its arguments and runs parallel loops") {
    HostThreadPool pool(3);
    HostStream s(pool);
    std::vector<int> out(1001, -1);
    Gate g;
    s.enqueue(g.wait_fn());
    FillArgs args{out.data(), static_cast<int64_t>(out.size()), 7};
    s.launch(&fill_kernel, &args, sizeof args, "fill");
    args.value = 1000;  // after launch: must not be seen by the kernel
    g.open();
    s.synchronize();
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == 7 + static_cast<int>(i));

    s.launch(&refusing_kernel, nullptr, 0, "refuser");
    CHECK_THROWS_WITH_AS(s.synchronize(),
                         doctest::Contains("host kernel refuser refused to run (status 3)"),
                         HostExecutionError);
}

TEST_CASE("host kernel scratch memory") {
    HostStream s;
    for (int64_t n : {10, 1000, 100, 100000}) {
        std::vector<int> out(n, -1);
        FillArgs args{out.data(), n, 3};
        s.launch(&scratch_kernel, &args, sizeof args, "scratch", sizeof(int) * n);
        s.synchronize();
        for (int64_t i = 0; i < n; ++i) REQUIRE(out[n - 1 - i] == 3 * static_cast<int>(i));
    }
    std::vector<int> out(64, -1);
    FillArgs args{out.data(), 64, 3};
    s.launch(&scratch_kernel, &args, sizeof args, "scratch", 8);  // asks for too little
    CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("scratch buffer too small"), HostExecutionError);
}
