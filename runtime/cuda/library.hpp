// Loaded device code: a Library (cuLibraryLoadData, context-independent) and its Kernels
// (cuLibraryGetKernel), plus the launch itself (cuLaunchKernelEx).
//
// launch_kernel() is the hot path: it builds a CUlaunchConfig on the stack and makes one driver call; the
// error path (CudaLaunchError with kernel name, grid, block, smem) is out of line.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <cuda.h>

#include "runtime/backend.hpp"
#include "runtime/cuda/driver.hpp"

namespace kiln::runtime {

class Kernel {
public:
    Kernel() = default;
    Kernel(CUkernel k, std::string name) : k_(k), name_(std::move(name)) {}

    CUkernel handle() const { return k_; }
    const std::string& name() const { return name_; }
    explicit operator bool() const { return k_ != nullptr; }

    // Load the kernel into the current context now rather than lazily at its first launch.
    void load_into_current_context() const;
    // Allow up to `bytes` of dynamic shared memory on `device` (cuKernelSetAttribute).
    void set_max_dynamic_smem(int bytes, CUdevice device) const;
    // Prefer `percent` of the unified L1 / shared memory as shared memory on `device`.
    void set_preferred_smem_carveout(int percent, CUdevice device) const;
    int attribute(CUfunction_attribute attr, CUdevice device) const;

private:
    CUkernel k_ = nullptr;
    std::string name_;
};

class Library {
public:
    Library() = default;
    // cuLibraryLoadData on a cubin image; the image may be freed afterwards.
    static Library load(const void* image, size_t size);
    ~Library();
    Library(Library&& o) noexcept : lib_(o.lib_) { o.lib_ = nullptr; }
    Library& operator=(Library&& o) noexcept;
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;

    // Throws CudaError naming the symbol when it is absent.
    Kernel kernel(const std::string& name) const;
    CUlibrary handle() const { return lib_; }

private:
    CUlibrary lib_ = nullptr;
};

[[noreturn]] void throw_launch_error(CUresult r, const char* kernel, const LaunchDims& d);

// Whether launches may overlap their predecessor (LaunchDims::overlap_prior); KILN_LAUNCH_OVERLAP=0
// turns it off process-wide (read once), e.g. to measure what the overlap is worth.
bool launch_overlap_enabled();

// The device half of Stream::launch: `args` is the kernel's argument array (cuLaunchKernelEx).
inline void launch_kernel(const KernelHandle& k, const LaunchDims& d, CUstream stream, void** args) {
    CUlaunchConfig cfg{};
    cfg.gridDimX = d.grid[0];
    cfg.gridDimY = d.grid[1];
    cfg.gridDimZ = d.grid[2];
    cfg.blockDimX = d.block[0];
    cfg.blockDimY = d.block[1];
    cfg.blockDimZ = d.block[2];
    cfg.sharedMemBytes = d.smem;
    cfg.hStream = stream;
    CUlaunchAttribute attr{};
    if (d.overlap_prior && launch_overlap_enabled()) {
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    CUresult r = driver().cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(k.cuda), args, nullptr);
    if (r != CUDA_SUCCESS) [[unlikely]] throw_launch_error(r, k.name, d);
}

}  // namespace kiln::runtime
