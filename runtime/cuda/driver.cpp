#include "runtime/cuda/driver.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include "runtime/env.hpp"
#include "runtime/log.hpp"

namespace kiln::runtime {

namespace {

// Loaded once; both the status and the table live for the whole process (the library is never closed).
struct Loaded {
    DriverStatus status;
    DriverApi api;
    bool have_error_fns = false;
};

template <typename Fn>
bool resolve(PFN_cuGetProcAddress_v12000 gpa, const char* name, int version, Fn& out, std::string& missing) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = gpa(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r != CUDA_SUCCESS || p == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {
        if (!missing.empty()) missing += ", ";
        missing += fmt::format("{} (v{})", name, version);
        return false;
    }
    out = reinterpret_cast<Fn>(p);
    return true;
}

Loaded load() {
    Loaded L;
    DriverStatus& s = L.status;
    std::string lib = env::get("KILN_CUDA_DRIVER").value_or("libcuda.so.1");
    s.library = lib;
    if (lib == "none") {
        s.state = DriverState::disabled;
        s.reason = "CUDA disabled by KILN_CUDA_DRIVER=none";
        return L;
    }
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        const char* e = dlerror();
        s.state = DriverState::no_library;
        s.reason = fmt::format("no CUDA driver: cannot load {} ({})", lib, e ? e : "unknown error");
        return L;
    }
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(h, "cuGetProcAddress_v2"));
    if (gpa == nullptr) {
        s.state = DriverState::too_old;
        s.reason = fmt::format("CUDA driver {} has no cuGetProcAddress_v2 (a CUDA 12.4+ driver is required)", lib);
        return L;
    }
    DriverApi& a = L.api;
    std::string missing;
    L.have_error_fns = resolve(gpa, "cuGetErrorName", 6000, a.cuGetErrorName, missing) &
                       resolve(gpa, "cuGetErrorString", 6000, a.cuGetErrorString, missing);
    resolve(gpa, "cuInit", 2000, a.cuInit, missing);
    resolve(gpa, "cuDriverGetVersion", 2020, a.cuDriverGetVersion, missing);
    resolve(gpa, "cuDeviceGetCount", 2000, a.cuDeviceGetCount, missing);
    resolve(gpa, "cuDeviceGet", 2000, a.cuDeviceGet, missing);
    resolve(gpa, "cuDeviceGetName", 2000, a.cuDeviceGetName, missing);
    resolve(gpa, "cuDeviceGetAttribute", 2000, a.cuDeviceGetAttribute, missing);
    resolve(gpa, "cuDeviceTotalMem", 3020, a.cuDeviceTotalMem, missing);
    resolve(gpa, "cuDevicePrimaryCtxRetain", 7000, a.cuDevicePrimaryCtxRetain, missing);
    resolve(gpa, "cuDevicePrimaryCtxRelease", 11000, a.cuDevicePrimaryCtxRelease, missing);
    resolve(gpa, "cuCtxSetCurrent", 4000, a.cuCtxSetCurrent, missing);
    resolve(gpa, "cuCtxGetCurrent", 4000, a.cuCtxGetCurrent, missing);
    resolve(gpa, "cuCtxSynchronize", 2000, a.cuCtxSynchronize, missing);
    resolve(gpa, "cuMemGetInfo", 3020, a.cuMemGetInfo, missing);
    resolve(gpa, "cuStreamCreate", 2000, a.cuStreamCreate, missing);
    resolve(gpa, "cuStreamDestroy", 4000, a.cuStreamDestroy, missing);
    resolve(gpa, "cuStreamSynchronize", 2000, a.cuStreamSynchronize, missing);
    resolve(gpa, "cuStreamBeginCapture", 10010, a.cuStreamBeginCapture, missing);
    resolve(gpa, "cuStreamEndCapture", 10000, a.cuStreamEndCapture, missing);
    resolve(gpa, "cuGraphInstantiateWithFlags", 11040, a.cuGraphInstantiateWithFlags, missing);
    resolve(gpa, "cuGraphLaunch", 10000, a.cuGraphLaunch, missing);
    resolve(gpa, "cuGraphExecDestroy", 10000, a.cuGraphExecDestroy, missing);
    resolve(gpa, "cuGraphDestroy", 10000, a.cuGraphDestroy, missing);
    resolve(gpa, "cuEventCreate", 2000, a.cuEventCreate, missing);
    resolve(gpa, "cuEventDestroy", 4000, a.cuEventDestroy, missing);
    resolve(gpa, "cuEventRecord", 2000, a.cuEventRecord, missing);
    resolve(gpa, "cuEventQuery", 2000, a.cuEventQuery, missing);
    resolve(gpa, "cuStreamWaitEvent", 3020, a.cuStreamWaitEvent, missing);
    resolve(gpa, "cuEventSynchronize", 2000, a.cuEventSynchronize, missing);
    resolve(gpa, "cuEventElapsedTime", 2000, a.cuEventElapsedTime, missing);
    resolve(gpa, "cuMemAlloc", 3020, a.cuMemAlloc, missing);
    resolve(gpa, "cuMemFree", 3020, a.cuMemFree, missing);
    resolve(gpa, "cuMemAllocHost", 3020, a.cuMemAllocHost, missing);
    resolve(gpa, "cuMemFreeHost", 2000, a.cuMemFreeHost, missing);
    resolve(gpa, "cuMemcpyHtoD", 3020, a.cuMemcpyHtoD, missing);
    resolve(gpa, "cuMemcpyDtoH", 3020, a.cuMemcpyDtoH, missing);
    resolve(gpa, "cuMemcpyDtoD", 3020, a.cuMemcpyDtoD, missing);
    resolve(gpa, "cuMemcpyHtoDAsync", 3020, a.cuMemcpyHtoDAsync, missing);
    resolve(gpa, "cuMemcpyDtoHAsync", 3020, a.cuMemcpyDtoHAsync, missing);
    resolve(gpa, "cuMemcpyDtoDAsync", 3020, a.cuMemcpyDtoDAsync, missing);
    resolve(gpa, "cuMemsetD8", 3020, a.cuMemsetD8, missing);
    resolve(gpa, "cuMemsetD32", 3020, a.cuMemsetD32, missing);
    resolve(gpa, "cuMemsetD8Async", 3020, a.cuMemsetD8Async, missing);
    resolve(gpa, "cuMemsetD32Async", 3020, a.cuMemsetD32Async, missing);
    resolve(gpa, "cuLibraryLoadData", 12000, a.cuLibraryLoadData, missing);
    resolve(gpa, "cuLibraryUnload", 12000, a.cuLibraryUnload, missing);
    resolve(gpa, "cuLibraryGetKernel", 12000, a.cuLibraryGetKernel, missing);
    resolve(gpa, "cuKernelGetFunction", 12000, a.cuKernelGetFunction, missing);
    resolve(gpa, "cuKernelSetAttribute", 12000, a.cuKernelSetAttribute, missing);
    resolve(gpa, "cuKernelGetAttribute", 12000, a.cuKernelGetAttribute, missing);
    resolve(gpa, "cuLaunchKernelEx", 11060, a.cuLaunchKernelEx, missing);
    if (!missing.empty()) {
        s.state = DriverState::too_old;
        s.reason = fmt::format("CUDA driver {} lacks entry points: {} (a CUDA 12.4+ driver is required)", lib, missing);
        return L;
    }
    a.cuDriverGetVersion(&s.driver_version);
    CUresult r = a.cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        s.state = DriverState::no_device;
        s.reason = "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)";
        return L;
    }
    if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        const char* str = nullptr;
        a.cuGetErrorName(r, &name);
        a.cuGetErrorString(r, &str);
        s.state = DriverState::init_failed;
        s.reason = fmt::format("cuInit failed: {} ({})", name ? name : "?", str ? str : "?");
        return L;
    }
    r = a.cuDeviceGetCount(&s.device_count);
    if (r != CUDA_SUCCESS || s.device_count == 0) {
        s.state = DriverState::no_device;
        s.reason = "no CUDA device (cuDeviceGetCount returned 0)";
        s.device_count = 0;
        return L;
    }
    s.state = DriverState::ready;
    return L;
}

const Loaded& loaded() {
    static const Loaded L = [] {
        Loaded l = load();
        if (!l.status.ready()) log::debug("{}", l.status.reason);
        return l;
    }();
    return L;
}

}  // namespace

const char* to_string(DriverState s) {
    switch (s) {
        case DriverState::ready: return "ready";
        case DriverState::disabled: return "disabled";
        case DriverState::no_library: return "no_library";
        case DriverState::too_old: return "too_old";
        case DriverState::init_failed: return "init_failed";
        case DriverState::no_device: return "no_device";
    }
    return "?";
}

const DriverStatus& driver_status() { return loaded().status; }

const DriverApi& driver() {
    const Loaded& L = loaded();
    if (!L.status.ready()) [[unlikely]] throw NoDevice(L.status.reason);
    return L.api;
}

std::string cuda_error_name(CUresult code) {
    const Loaded& L = loaded();
    const char* s = nullptr;
    if (L.have_error_fns && L.api.cuGetErrorName(code, &s) == CUDA_SUCCESS && s) return s;
    return fmt::format("CUDA_ERROR_{}", static_cast<int>(code));
}

std::string cuda_error_string(CUresult code) {
    const Loaded& L = loaded();
    const char* s = nullptr;
    if (L.have_error_fns && L.api.cuGetErrorString(code, &s) == CUDA_SUCCESS && s) return s;
    return "unknown CUDA error";
}

CudaError::CudaError(std::string call, CUresult code, const std::string& detail)
    : Error(fmt::format("{} failed: {} ({}){}", call, cuda_error_name(code), cuda_error_string(code),
                        detail.empty() ? "" : "; " + detail)),
      call_(std::move(call)),
      code_(code) {}

CudaLaunchError::CudaLaunchError(CUresult code, std::string kernel, std::array<uint32_t, 3> grid,
                                 std::array<uint32_t, 3> block, uint32_t smem)
    : CudaError("cuLaunchKernelEx", code,
                fmt::format("kernel {} grid ({},{},{}) block ({},{},{}) dynamic smem {} B", kernel, grid[0], grid[1],
                            grid[2], block[0], block[1], block[2], smem)),
      kernel_(std::move(kernel)),
      grid_(grid),
      block_(block),
      smem_(smem) {}

void throw_cuda_error(const char* call, CUresult code) { throw CudaError(call, code); }

std::string format_cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

}  // namespace kiln::runtime
