// Device query, memory, copies, streams, events and graphs on a real GPU.
#include <doctest/doctest.h>

#include <numeric>
#include <random>
#include <vector>

#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/cuda/stream.hpp"

using namespace kiln::runtime;

TEST_CASE("device properties are sane") {
    REQUIRE(device_count() >= 1);
    DeviceProps p = device_props(0);
    CHECK_FALSE(p.name.empty());
    CHECK(p.sm_count > 0);
    CHECK(p.cc_major >= 7);
    CHECK(p.total_memory > (1ull << 30));
    CHECK(p.max_smem_per_block_optin >= 48 * 1024);
    CHECK(p.target().rfind("sm_", 0) == 0);
    CHECK(driver_status().driver_version >= 12000);
    CHECK_THROWS_AS(device_props(device_count()), kiln::InvalidArgument);
}

TEST_CASE("sync and async copies round trip; fills; events time a copy") {
    Context ctx(0);
    std::mt19937 rng(1);
    std::vector<uint32_t> host(1 << 20);
    for (auto& v : host) v = rng();
    DeviceBuffer a = to_device(host);
    DeviceBuffer b(a.size());
    fill_u32(b.ptr(), 0xdeadbeefu, b.size() / 4);
    CHECK(to_host<uint32_t>(b)[12345] == 0xdeadbeefu);
    copy_d2d(b.ptr(), a.ptr(), a.size());
    CHECK(to_host<uint32_t>(b) == host);

    Stream s;
    Event start, stop;
    DeviceBuffer c(a.size());
    std::vector<uint32_t> back(host.size(), 0);
    fill_u8_async(c.ptr(), 0x5a, c.size(), s);
    start.record(s);
    copy_d2d_async(c.ptr(), a.ptr(), a.size(), s);
    stop.record(s);
    copy_d2h_async(back.data(), c.ptr(), c.size(), s);
    s.synchronize();
    CHECK(back == host);
    CHECK(Event::elapsed_ms(start, stop) >= 0.0f);

    std::vector<uint32_t> up(host.rbegin(), host.rend());
    copy_h2d_async(c.ptr(), up.data(), up.size() * 4, s);
    fill_u32_async(b.ptr(), 7u, 16, s);
    s.synchronize();
    CHECK(to_host<uint32_t>(c) == up);
    CHECK(to_host<uint32_t>(b)[15] == 7u);
    MemInfo m = mem_info();
    CHECK(m.free > 0);
    CHECK(m.total >= m.free);
}

TEST_CASE("a captured graph replays its copies") {
    Context ctx(0);
    Stream s;
    std::vector<uint32_t> host(4096);
    std::iota(host.begin(), host.end(), 3u);
    DeviceBuffer src = to_device(host), dst(src.size());
    fill_u32(dst.ptr(), 0, dst.size() / 4);
    s.begin_capture();
    copy_d2d_async(dst.ptr(), src.ptr(), src.size(), s);
    Stream::Graph g = s.end_capture();
    CHECK(to_host<uint32_t>(dst)[5] == 0u);  // capture records, it does not run
    g.launch(s);
    s.synchronize();
    CHECK(to_host<uint32_t>(dst) == host);
}

TEST_CASE("driver errors carry the call name") {
    Context ctx(0);
    try {
        DeviceBuffer huge(size_t(1) << 50);
        FAIL("expected CudaError");
    } catch (const CudaError& e) {
        CHECK(e.call() == "cuMemAlloc");
        CHECK(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
    }
}
