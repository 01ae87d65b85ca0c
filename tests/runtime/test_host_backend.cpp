// The host backend (runtime/host/): the thread pool of host kernels, host streams and events with CUDA stream
// semantics, host kernel launches through the C ABI, host buffers, and the Stream interface's common sequence.
#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/host/stream.hpp"
#include "runtime/host/thread_pool.hpp"
#include "tests/common/stream_sequence.hpp"

using namespace kiln::runtime;

namespace {

// The backend every stream below belongs to (the process-wide pool).
HostBackend& host() {
    static HostBackend b;
    return b;
}

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
    HostStream s(host());
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
    HostStream s(host());
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
    HostStream a(host()), b(host());
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
    HostStream a(host()), b(host()), c(host());
    HostEvent ev;
    HostStream idle(host());
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
    HostStream s(host());
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
    HostStream a(host()), b(host());
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
        HostStream s(host());
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
// Reports the pool it was given.
extern "C" void threads_kernel(const kiln_host_ctx* ctx, const void* args) {
    **static_cast<uint32_t* const*>(args) = ctx->num_threads;
}
// The sequence's kernel: out[i] = 3 in[i] + 1 over 32-bit words, in a parallel loop.
struct AffineArgs {
    const uint32_t* in;
    uint32_t* out;
    int64_t n;
};
extern "C" void affine_chunk(void* arg, int64_t b, int64_t e) {
    const AffineArgs* a = static_cast<const AffineArgs*>(arg);
    for (int64_t i = b; i < e; ++i) a->out[i] = 3u * a->in[i] + 1u;
}
extern "C" void affine_kernel(const kiln_host_ctx* ctx, const void* args) {
    ctx->parallel_for(ctx->pool, static_cast<const AffineArgs*>(args)->n, 64, &affine_chunk, const_cast<void*>(args));
}

KernelHandle host_kernel(kiln_host_entry entry, const char* name, uint64_t scratch = 0) {
    KernelHandle k;
    k.kind = BackendKind::host;
    k.host = entry;
    k.host_scratch_bytes = scratch;
    k.name = name;
    return k;
}
}  // namespace

TEST_CASE("host kernel launch copies its arguments and runs parallel loops") {
    HostThreadPool pool(3);
    HostBackend backend(pool);
    CHECK(backend.compute_units() == 3);
    CHECK(backend.name() == "host (3 threads)");
    HostStream s(backend);
    CHECK(&s.pool() == &pool);
    std::vector<int> out(1001, -1);
    Gate g;
    s.enqueue(g.wait_fn());
    FillArgs args{out.data(), static_cast<int64_t>(out.size()), 7};
    s.launch(host_kernel(&fill_kernel, "fill"), LaunchDims{}, args);
    args.value = 1000;  // after launch: must not be seen by the kernel
    g.open();
    s.synchronize();
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == 7 + static_cast<int>(i));
    uint32_t threads = 0;
    uint32_t* where = &threads;
    s.launch(host_kernel(&threads_kernel, "threads"), LaunchDims{}, where);
    s.synchronize();
    CHECK(threads == 3);

    s.launch(host_kernel(&refusing_kernel, "refuser"), LaunchDims{}, nullptr, 0);
    CHECK_THROWS_WITH_AS(s.synchronize(),
                         doctest::Contains("host kernel refuser refused to run (status 3)"),
                         HostExecutionError);
}

TEST_CASE("a host stream refuses a kernel that is not a host kernel, before enqueueing it") {
    HostStream s(host());
    KernelHandle device;  // a CUDA kernel handle (kind cuda)
    device.name = "some_device_kernel";
    int args = 0;
    CHECK_THROWS_WITH_AS(s.launch(device, LaunchDims{}, args),
                         doctest::Contains("some_device_kernel is not a host kernel"), kiln::InvalidArgument);
    KernelHandle empty = host_kernel(nullptr, "no_entry");
    CHECK_FALSE(static_cast<bool>(empty));
    CHECK_THROWS_AS(s.launch(empty, LaunchDims{}, args), kiln::InvalidArgument);
    CHECK_NOTHROW(s.synchronize());  // nothing was enqueued, so nothing failed
}

TEST_CASE("host kernel scratch memory") {
    HostStream s(host());
    for (int64_t n : {10, 1000, 100, 100000}) {
        std::vector<int> out(n, -1);
        FillArgs args{out.data(), n, 3};
        s.launch(host_kernel(&scratch_kernel, "scratch", sizeof(int) * n), LaunchDims{}, args);
        s.synchronize();
        for (int64_t i = 0; i < n; ++i) REQUIRE(out[n - 1 - i] == 3 * static_cast<int>(i));
    }
    std::vector<int> out(64, -1);
    FillArgs args{out.data(), 64, 3};
    s.launch(host_kernel(&scratch_kernel, "scratch", 8), LaunchDims{}, args);  // asks for too little
    CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("scratch buffer too small"), HostExecutionError);
}

TEST_CASE("host buffers: aligned, owning, movable, viewed as tensors") {
    HostBackend& b = host();
    CHECK(b.kind() == BackendKind::host);
    CHECK(b.location() == Location::host);
    CHECK(b.compute_units() == static_cast<int>(HostThreadPool::global().threads()));
    Buffer empty = b.alloc(0);
    CHECK_FALSE(static_cast<bool>(empty));
    CHECK(empty.size() == 0);
    Buffer a = b.alloc(100);
    REQUIRE(static_cast<bool>(a));
    CHECK(a.size() == 100);
    CHECK(a.addr() % 64 == 0);
    CHECK(a.backend() == &b);
    CHECK(a.data() == a.as<void>());
    const uint64_t addr = a.addr();
    Buffer moved = std::move(a);
    CHECK(moved.addr() == addr);
    CHECK_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
    Buffer assigned = b.alloc(8);
    assigned = std::move(moved);
    CHECK(assigned.addr() == addr);
    TensorView v = assigned.view(DType::i32, {5, 5});
    CHECK(v.data == assigned.data());
    CHECK(v.location == Location::host);
    CHECK(v.bytes() == 100);
    CHECK_THROWS_WITH_AS(assigned.view(DType::f32, {26}), doctest::Contains("needs 104 bytes but the buffer holds 100"),
                         kiln::InvalidArgument);
    assigned.reset();
    CHECK_FALSE(static_cast<bool>(assigned));
    const std::vector<uint16_t> src = {1, 2, 3, 4, 5};
    Buffer up = upload_buffer(b, src.data(), src.size() * 2);
    CHECK(std::vector<uint16_t>(up.as<uint16_t>(), up.as<uint16_t>() + 5) == src);
    CHECK_FALSE(static_cast<bool>(upload_buffer(b, nullptr, 0)));
}

TEST_CASE("the Stream interface's common sequence on the host backend") {
    Backend& b = host();
    kiln::test::SequenceKernel k;
    k.name = "affine host kernel";
    for (uint32_t i = 0; i < 3000; ++i) k.input.push_back(i * 2654435761u + 17u);
    for (uint32_t v : k.input) k.expect.push_back(3u * v + 1u);
    const KernelHandle h = host_kernel(&affine_kernel, "affine");
    k.launch = [&](Stream& s, uint64_t in, uint64_t out) {
        s.launch(h, LaunchDims{}, AffineArgs{reinterpret_cast<const uint32_t*>(in), reinterpret_cast<uint32_t*>(out),
                                             static_cast<int64_t>(k.input.size())});
    };
    kiln::test::run_stream_sequence(b, k);
    // and on a backend with a thread pool of its own
    HostThreadPool pool(2);
    HostBackend small(pool);
    kiln::test::run_stream_sequence(small, k);
}
