// Single flight: many threads asking for the same missing kernel compile it once.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "jit/families/moe_routing.hpp"
#include "jit/kernel_key.hpp"
#include "jit/nvrtc.hpp"
#include "jit/single_flight.hpp"

using namespace kiln::jit;

TEST_CASE("concurrent requests for one kernel run one NVRTC compile") {
    const Family& f = builtin_families().get("moe_routing");
    KernelRecipe r = make_recipe(f, MoeRoutingFamily::descriptor(16, 2, Target::sm(90, 'a'), 8, 2),
                                 TemplateStore::instance());
    kiln::cache::ContentKey key = content_key(r, compiler_identity());
    CudaHeaders h = locate_cuda_headers();

    SingleFlight<kiln::cache::ContentKey, std::shared_ptr<NvrtcOutput>, kiln::cache::ContentKeyHash> flight;
    std::atomic<int> compiles{0}, leaders{0};
    std::vector<std::shared_ptr<NvrtcOutput>> results(8);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            bool leader = false;
            results[t] = flight.run(key, [&] {
                compiles.fetch_add(1);
                return std::make_shared<NvrtcOutput>(Nvrtc::instance().compile(nvrtc_program(r, h)));
            }, &leader);
            if (leader) leaders.fetch_add(1);
        });
    for (auto& th : threads) th.join();
    CHECK(compiles.load() == 1);
    CHECK(leaders.load() == 1);
    for (const auto& res : results) CHECK(res.get() == results[0].get());
    CHECK_FALSE(results[0]->cubin.empty());
    CHECK(flight.in_flight() == 0);
}

TEST_CASE("a failure reaches every waiter and is not memoised") {
    SingleFlight<int, int> flight;
    std::atomic<int> calls{0};
    std::atomic<bool> release{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            try {
                flight.run(7, [&]() -> int {
                    calls.fetch_add(1);
                    while (!release.load()) std::this_thread::yield();
                    throw std::runtime_error("compile failed");
                });
            } catch (const std::runtime_error&) {
                failures.fetch_add(1);
            }
        });
    // Let the waiters pile up behind the leader before it fails.
    while (flight.in_flight() == 0) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release.store(true);
    for (auto& th : threads) th.join();
    CHECK(failures.load() == 4);
    CHECK(calls.load() >= 1);
    CHECK(flight.run(7, [] { return 42; }) == 42);  // the next call starts a new flight
}
