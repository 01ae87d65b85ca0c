// The CUDA backend on a real GPU: device query, buffers, stream copies and fills, events, graphs, driver
// errors, and the refusals between the CUDA and the host backend's objects.
#include <doctest/doctest.h>

#include <numeric>
#include <random>
#include <vector>

#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/stream.hpp"
#include "runtime/host/stream.hpp"
#include "tests/common/tensors.hpp"

using namespace kiln::runtime;

namespace {

CudaBackend& gpu() {
    static CudaBackend b(0);
    b.make_current();
    return b;
}

// The whole buffer back as T.
template <typename T>
std::vector<T> read(Backend& b, const Buffer& buf) {
    return kiln::test::download<T>(b, buf, buf.size() / sizeof(T));
}

}  // namespace

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
    CudaBackend& b = gpu();
    CHECK(b.kind() == BackendKind::cuda);
    CHECK(b.location() == Location::device);
    CHECK(b.compute_units() == p.sm_count);
    CHECK(b.name() == "cuda:0 " + p.name);
    CHECK(b.props().target() == p.target());
}

TEST_CASE("buffers, stream copies and fills round trip; events time a copy") {
    CudaBackend& be = gpu();
    std::mt19937 rng(1);
    std::vector<uint32_t> host(1 << 20);
    for (auto& v : host) v = rng();
    Buffer a = upload_buffer(be, host.data(), host.size() * 4);
    CHECK(a.backend() == &be);
    CHECK(a.size() == host.size() * 4);
    CHECK(read<uint32_t>(be, a) == host);
    CHECK_FALSE(static_cast<bool>(be.alloc(0)));
    TensorView v = a.view(DType::i32, {1024, 1024});
    CHECK(v.location == Location::device);
    CHECK(v.data == a.data());

    std::unique_ptr<Stream> s = be.create_stream();
    CHECK(s->kind() == BackendKind::cuda);
    std::unique_ptr<Event> start = be.create_event(), stop = be.create_event();
    Buffer b = be.alloc(a.size()), c = be.alloc(a.size());
    std::vector<uint32_t> back(host.size(), 0);
    s->fill_u32(b.addr(), 0xdeadbeefu, b.size() / 4);
    s->fill_u8(c.addr(), 0x5a, c.size());
    s->record(*start);
    s->copy(c.addr(), a.addr(), a.size());
    s->record(*stop);
    s->download(back.data(), c.addr(), c.size());
    s->synchronize();
    CHECK(back == host);
    CHECK(read<uint32_t>(be, b)[12345] == 0xdeadbeefu);
    CHECK(stop->query());
    CHECK(stop->elapsed_ms_since(*start) >= 0.0);

    std::vector<uint32_t> up(host.rbegin(), host.rend());
    s->upload(c.addr(), up.data(), up.size() * 4);
    s->fill_u32(b.addr(), 7u, 16);
    s->synchronize();
    CHECK(read<uint32_t>(be, c) == up);
    CHECK(read<uint32_t>(be, b)[15] == 7u);
    CHECK(read<uint32_t>(be, b)[16] == 0xdeadbeefu);
    MemInfo m = mem_info();
    CHECK(m.free > 0);
    CHECK(m.total >= m.free);

    // Moving a buffer moves ownership; the memory is freed once.
    const uint64_t addr = b.addr();
    Buffer moved = std::move(b);
    CHECK(moved.addr() == addr);
    CHECK_FALSE(static_cast<bool>(b));  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
    moved.reset();
    CHECK_FALSE(static_cast<bool>(moved));
}

TEST_CASE("a captured graph replays its copies") {
    CudaBackend& be = gpu();
    CudaStream s(be);
    CHECK(cuda_stream(s) == s.handle());
    std::vector<uint32_t> host(4096);
    std::iota(host.begin(), host.end(), 3u);
    Buffer src = upload_buffer(be, host.data(), host.size() * 4), dst = be.alloc(src.size());
    s.fill_u32(dst.addr(), 0, dst.size() / 4);
    s.synchronize();
    s.begin_capture();
    s.copy(dst.addr(), src.addr(), src.size());
    CudaStream::Graph g = s.end_capture();
    CHECK(read<uint32_t>(be, dst)[5] == 0u);  // capture records, it does not run
    g.launch(s);
    s.synchronize();
    CHECK(read<uint32_t>(be, dst) == host);
}

TEST_CASE("driver errors carry the call name") {
    CudaBackend& be = gpu();
    try {
        Buffer huge = be.alloc(size_t(1) << 50);
        FAIL("expected CudaError");
    } catch (const CudaError& e) {
        CHECK(e.call() == "cuMemAlloc");
        CHECK(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
    }
}

TEST_CASE("CUDA and host objects do not mix") {
    CudaBackend& be = gpu();
    HostBackend host;
    std::unique_ptr<Stream> cs = be.create_stream(), hs = host.create_stream();
    std::unique_ptr<Event> ce = be.create_event(), he = host.create_event();
    CHECK_THROWS_AS(cs->record(*he), kiln::InvalidArgument);
    CHECK_THROWS_AS(cs->wait(*he), kiln::InvalidArgument);
    CHECK_THROWS_AS(hs->record(*ce), kiln::InvalidArgument);
    CHECK_THROWS_AS(hs->wait(*ce), kiln::InvalidArgument);
    cs->record(*ce);
    hs->record(*he);
    cs->synchronize();
    hs->synchronize();
    CHECK_THROWS_AS(ce->elapsed_ms_since(*he), kiln::InvalidArgument);
    CHECK_THROWS_AS(he->elapsed_ms_since(*ce), kiln::InvalidArgument);
    CHECK_THROWS_AS(cuda_stream(*hs), kiln::InvalidArgument);
    KernelHandle host_kernel;
    host_kernel.kind = BackendKind::host;
    host_kernel.host = [](const kiln_host_ctx*, const void*) {};
    host_kernel.name = "a_host_kernel";
    int args = 0;
    CHECK_THROWS_WITH_AS(cs->launch(host_kernel, LaunchDims{}, args),
                         doctest::Contains("a_host_kernel is not a device kernel"), kiln::InvalidArgument);
    cs->synchronize();
}
