// The CUDA Driver API, reached without linking libcuda: dlopen("libcuda.so.1") (or KILN_CUDA_DRIVER),
// then cuGetProcAddress_v2 with an explicit CUDA version for every entry point, so each pointer has the
// ABI of the typedef it is stored in (<cudaTypedefs.h>; <cuda.h> is used for types only).
//
// Loading happens once, on first use, and never throws: driver_status() says whether the driver is
// usable and, if not, why (no library, driver too old, cuInit failed, no device). driver() returns the
// entry points or throws NoDevice with that reason. Everything that needs no GPU keeps working.
//
// Every call is checked with cu_check(result, "cuName"), which throws CudaError carrying the call
// name and the CUDA error name and string. Failed launches throw CudaLaunchError, which adds the
// kernel name, grid, block and dynamic shared memory.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "runtime/error.hpp"

namespace kiln::runtime {

// No usable CUDA driver or device. what() names the reason (library missing, no device, ...).
class NoDevice : public Error {
public:
    using Error::Error;
};

// A driver call returned an error.
class CudaError : public Error {
public:
    CudaError(std::string call, CUresult code, const std::string& detail = "");
    const std::string& call() const { return call_; }
    CUresult code() const { return code_; }

private:
    std::string call_;
    CUresult code_;
};

// A kernel launch failed; the message also names the kernel and its launch geometry.
class CudaLaunchError : public CudaError {
public:
    CudaLaunchError(CUresult code, std::string kernel, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                    uint32_t smem);
    const std::string& kernel() const { return kernel_; }
    std::array<uint32_t, 3> grid() const { return grid_; }
    std::array<uint32_t, 3> block() const { return block_; }
    uint32_t smem() const { return smem_; }

private:
    std::string kernel_;
    std::array<uint32_t, 3> grid_, block_;
    uint32_t smem_;
};

// "CUDA_ERROR_OUT_OF_MEMORY" / "out of memory"; work even when the driver is not loaded.
std::string cuda_error_name(CUresult code);
std::string cuda_error_string(CUresult code);

// Resolved entry points. Each member's type names the ABI version requested from cuGetProcAddress.
struct DriverApi {
    PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
    PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
    PFN_cuInit_v2000 cuInit = nullptr;
    PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
    PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
    PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
    PFN_cuDeviceGetName_v2000 cuDeviceGetName = nullptr;
    PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
    PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem = nullptr;
    PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
    PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease = nullptr;
    PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
    PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
    PFN_cuCtxSynchronize_v2000 cuCtxSynchronize = nullptr;
    PFN_cuMemGetInfo_v3020 cuMemGetInfo = nullptr;
    PFN_cuStreamCreate_v2000 cuStreamCreate = nullptr;
    PFN_cuStreamDestroy_v4000 cuStreamDestroy = nullptr;
    PFN_cuStreamSynchronize_v2000 cuStreamSynchronize = nullptr;
    PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture = nullptr;
    PFN_cuStreamEndCapture_v10000 cuStreamEndCapture = nullptr;
    PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags = nullptr;
    PFN_cuGraphLaunch_v10000 cuGraphLaunch = nullptr;
    PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy = nullptr;
    PFN_cuGraphDestroy_v10000 cuGraphDestroy = nullptr;
    PFN_cuEventCreate_v2000 cuEventCreate = nullptr;
    PFN_cuEventDestroy_v4000 cuEventDestroy = nullptr;
    PFN_cuEventRecord_v2000 cuEventRecord = nullptr;
    PFN_cuEventSynchronize_v2000 cuEventSynchronize = nullptr;
    PFN_cuEventElapsedTime_v2000 cuEventElapsedTime = nullptr;
    PFN_cuEventQuery_v2000 cuEventQuery = nullptr;
    PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent = nullptr;
    PFN_cuMemAlloc_v3020 cuMemAlloc = nullptr;
    PFN_cuMemFree_v3020 cuMemFree = nullptr;
    PFN_cuMemAllocHost_v3020 cuMemAllocHost = nullptr;
    PFN_cuMemFreeHost_v2000 cuMemFreeHost = nullptr;
    PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD = nullptr;
    PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH = nullptr;
    PFN_cuMemcpyDtoD_v3020 cuMemcpyDtoD = nullptr;
    PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync = nullptr;
    PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync = nullptr;
    PFN_cuMemcpyDtoDAsync_v3020 cuMemcpyDtoDAsync = nullptr;
    PFN_cuMemsetD8_v3020 cuMemsetD8 = nullptr;
    PFN_cuMemsetD32_v3020 cuMemsetD32 = nullptr;
    PFN_cuMemsetD8Async_v3020 cuMemsetD8Async = nullptr;
    PFN_cuMemsetD32Async_v3020 cuMemsetD32Async = nullptr;
    PFN_cuLibraryLoadData_v12000 cuLibraryLoadData = nullptr;
    PFN_cuLibraryUnload_v12000 cuLibraryUnload = nullptr;
    PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel = nullptr;
    PFN_cuKernelGetFunction_v12000 cuKernelGetFunction = nullptr;
    PFN_cuKernelSetAttribute_v12000 cuKernelSetAttribute = nullptr;
    PFN_cuKernelGetAttribute_v12000 cuKernelGetAttribute = nullptr;
    PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx = nullptr;
};

enum class DriverState : uint8_t {
    ready,          // entry points resolved, cuInit succeeded, at least one device
    disabled,       // KILN_CUDA_DRIVER=none
    no_library,     // libcuda.so.1 could not be loaded
    too_old,        // cuGetProcAddress_v2 or a required entry point is missing (needs a CUDA 12.4+ driver)
    init_failed,    // cuInit returned an error
    no_device,      // cuInit succeeded but there is no device
};
const char* to_string(DriverState s);

struct DriverStatus {
    DriverState state = DriverState::no_library;
    std::string reason;       // one line; empty when ready
    std::string library;      // what was dlopen'ed
    int driver_version = 0;   // e.g. 13000 (cuDriverGetVersion), 0 when unknown
    int device_count = 0;
    bool ready() const { return state == DriverState::ready; }
};

// Loads the driver on first call (thread-safe); never throws.
const DriverStatus& driver_status();
inline bool has_device() { return driver_status().ready(); }

// The entry points; throws NoDevice(reason) unless the driver is ready.
const DriverApi& driver();

// Throws CudaError(call, code) unless code == CUDA_SUCCESS. Kept inline so the success path is one branch.
[[noreturn]] void throw_cuda_error(const char* call, CUresult code);
inline void cu_check(CUresult code, const char* call) {
    if (code != CUDA_SUCCESS) [[unlikely]] throw_cuda_error(call, code);
}

// "13.0" from 13000.
std::string format_cuda_version(int v);

}  // namespace kiln::runtime
