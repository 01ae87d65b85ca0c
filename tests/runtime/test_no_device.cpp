// With the driver disabled (as on a machine without one), kiln reports a typed NoDevice state and
// everything that needs no GPU keeps working.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/exec_target.hpp"
#include "runtime/host/stream.hpp"

using namespace kiln::runtime;

// Runs before main, so before the driver is first touched.
static const int g_disable = setenv("KILN_CUDA_DRIVER", "none", 1);

TEST_CASE("a disabled driver is a typed no-device state") {
    (void)g_disable;
    const DriverStatus& s = driver_status();
    CHECK(s.state == DriverState::disabled);
    CHECK_FALSE(s.ready());
    CHECK_FALSE(has_device());
    CHECK(device_count() == 0);
    CHECK(s.reason.find("KILN_CUDA_DRIVER") != std::string::npos);
    CHECK(all_devices().empty());
}

TEST_CASE("GPU operations throw NoDevice with the reason") {
    CHECK_THROWS_AS(driver(), NoDevice);
    CHECK_THROWS_AS(Context(0), NoDevice);
    CHECK_THROWS_AS(device_props(0), NoDevice);
    CHECK_THROWS_AS(make_backend(ExecTarget::cuda), NoDevice);
    CHECK_THROWS_AS(resolve_exec_target(TargetPreference::cuda), NoDevice);
    try {
        CudaBackend b(0);
        FAIL("expected NoDevice");
    } catch (const NoDevice& e) {
        CHECK(std::string(e.what()).find("disabled") != std::string::npos);
    }
}

TEST_CASE("the host backend works without a driver") {
    if (!host_target_available()) return;  // a GPU-only build has nothing to run here
    CHECK(resolve_exec_target(TargetPreference::auto_select) == ExecTarget::host);
    std::unique_ptr<Backend> b = make_backend(exec_target());
    REQUIRE(b->kind() == BackendKind::host);
    Buffer buf = b->alloc(64);
    std::unique_ptr<Stream> s = b->create_stream();
    std::vector<uint32_t> got(16, 0);
    s->fill_u32(buf.addr(), 0x01020304u, 16);
    s->download(got.data(), buf.addr(), 64);
    s->synchronize();
    CHECK(got == std::vector<uint32_t>(16, 0x01020304u));
}

TEST_CASE("CUDA errors name the call and the error, launch errors the geometry") {
    CudaError e("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY, "64 bytes");
    std::string m = e.what();
    CHECK(m.find("cuMemAlloc") != std::string::npos);
    CHECK(m.find("64 bytes") != std::string::npos);
    CHECK(e.code() == CUDA_ERROR_OUT_OF_MEMORY);
    CudaLaunchError l(CUDA_ERROR_INVALID_VALUE, "my_kernel", {4, 2, 1}, {128, 1, 1}, 4096);
    m = l.what();
    CHECK(m.find("cuLaunchKernelEx") != std::string::npos);
    CHECK(m.find("my_kernel") != std::string::npos);
    CHECK(m.find("grid (4,2,1)") != std::string::npos);
    CHECK(m.find("block (128,1,1)") != std::string::npos);
    CHECK(m.find("4096") != std::string::npos);
}

TEST_CASE("targets from compute capability") {
    CHECK(target_for_compute_capability(9, 0) == "sm_90a");
    CHECK(target_for_compute_capability(8, 9) == "sm_89");
    CHECK(target_for_compute_capability(8, 0) == "sm_80");
    CHECK(target_for_compute_capability(10, 0) == "sm_100a");
    CHECK(format_cuda_version(13000) == "13.0");
    CHECK(format_cuda_version(12080) == "12.8");
}
