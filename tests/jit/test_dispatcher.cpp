// Dispatcher with the SQLite kernel cache: one compile per key, hits without NVRTC, re-keying.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/kernel_key.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/error.hpp"
#include "tests/common/sandbox.hpp"

using namespace kiln::jit;
namespace fs = std::filesystem;

namespace {

using kiln::test::TempDir;

kiln::cache::StoreOptions store_options(const TempDir& d) {
    kiln::cache::StoreOptions o;
    o.cache_dir = d.path.string();
    return o;
}

const Target k_h200 = Target::sm(90, 'a');

}  // namespace

TEST_CASE("concurrent builds of one missing kernel compile once and store one artifact") {
    TempDir dir;
    kiln::cache::Store store(store_options(dir));
    DispatcherOptions o;
    o.store = &store;
    Dispatcher disp(o);
    KernelDescriptor d = MoeRoutingFamily::descriptor(24, 3, k_h200, 8, 2);
    std::vector<BuildResult> results(6);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t) threads.emplace_back([&, t] { results[t] = disp.build(d); });
    for (auto& th : threads) th.join();
    CHECK(disp.stats().compiles == 1);
    for (const BuildResult& r : results) {
        CHECK(r.key == results[0].key);
        CHECK(r.kernel_name == results[0].kernel_name);
        CHECK(r.bytes > 0);
    }
    CHECK(store.list().size() == 1);
    auto info = store.find(results[0].key.hex());
    REQUIRE(info.has_value());
    CHECK(info->family == "moe_routing");
    CHECK(info->mode == "indexed");
    CHECK(info->experts == 24);
    CHECK(info->target == "sm_90a");
    CHECK(info->config == "topk=3,block_m=8,warps=2");  // `kiln cache ls` shows the named fields
    CHECK(info->config == cache_config_text(d));
    CHECK(info->compiler == Nvrtc::instance().identity());

    // A second dispatcher (a new process, as far as the store is concerned) hits.
    Dispatcher again(o);
    BuildResult r = again.build(d);
    CHECK(r.cache_hit);
    CHECK(r.key == results[0].key);
    CHECK(again.stats().compiles == 0);
    CHECK(again.stats().store_hits == 1);
}

TEST_CASE("a lookup keyed with a different compiler identity re-keys to the real NVRTC and finds the artifact") {
    TempDir dir;
    kiln::cache::Store store(store_options(dir));
    DispatcherOptions o;
    o.store = &store;
    KernelDescriptor d = DequantGemvFamily::descriptor(2, 64, 128, k_h200);
    BuildResult first = Dispatcher(o).build(d);
    CHECK_FALSE(first.cache_hit);
    setenv("KILN_NVRTC_VERSION", "12.1", 1);
    Dispatcher other(o);
    BuildResult r = other.build(d);
    unsetenv("KILN_NVRTC_VERSION");
    CHECK(r.cache_hit);
    CHECK(r.key == first.key);
    CHECK(other.stats().compiles == 0);
    CHECK(store.list().size() == 1);
}

TEST_CASE("bad descriptors are refused before anything is compiled or stored") {
    TempDir dir;
    kiln::cache::Store store(store_options(dir));
    DispatcherOptions o;
    o.store = &store;
    Dispatcher disp(o);
    KernelDescriptor d;
    d.family = ShortName("dequant_gemv");
    d.m = 1;
    d.n = 64;
    d.k = 33;
    d.target = k_h200;
    CHECK_THROWS_AS(disp.build(d), kiln::InvalidArgument);
    d.family = ShortName("unknown_family");
    CHECK_THROWS_AS(disp.build(d), kiln::NotFound);
    CHECK(disp.stats().compiles == 0);
    CHECK(store.list().empty());
}

TEST_CASE("without a device, get() is a typed NoDevice error") {
    if (kiln::runtime::has_device()) return;  // covered by the gpu suite
    Dispatcher disp;
    CHECK_THROWS_AS(disp.get(MoeRoutingFamily::descriptor(8, 2, k_h200)), kiln::runtime::NoDevice);
}
