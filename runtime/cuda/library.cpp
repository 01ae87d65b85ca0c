#include "runtime/cuda/library.hpp"

#include "runtime/env.hpp"

#include <utility>

#include <fmt/format.h>

namespace kiln::runtime {

void Kernel::load_into_current_context() const {
    CUfunction f = nullptr;
    CUresult r = driver().cuKernelGetFunction(&f, k_);
    if (r != CUDA_SUCCESS) throw CudaError("cuKernelGetFunction", r, "kernel " + name_);
}

void Kernel::set_max_dynamic_smem(int bytes, CUdevice device) const {
    CUresult r = driver().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes, k_, device);
    if (r != CUDA_SUCCESS)
        throw CudaError("cuKernelSetAttribute", r, fmt::format("kernel {} max dynamic smem {} B", name_, bytes));
}

void Kernel::set_preferred_smem_carveout(int percent, CUdevice device) const {
    CUresult r = driver().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent, k_, device);
    if (r != CUDA_SUCCESS)
        throw CudaError("cuKernelSetAttribute", r, fmt::format("kernel {} shared memory carveout {}%", name_, percent));
}

int Kernel::attribute(CUfunction_attribute attr, CUdevice device) const {
    int v = 0;
    CUresult r = driver().cuKernelGetAttribute(&v, attr, k_, device);
    if (r != CUDA_SUCCESS) throw CudaError("cuKernelGetAttribute", r, "kernel " + name_);
    return v;
}

Library Library::load(const void* image, size_t size) {
    Library l;
    CUresult r = driver().cuLibraryLoadData(&l.lib_, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (r != CUDA_SUCCESS) throw CudaError("cuLibraryLoadData", r, fmt::format("{}-byte image", size));
    return l;
}

Library::~Library() {
    if (lib_ != nullptr) driver().cuLibraryUnload(lib_);
}

Library& Library::operator=(Library&& o) noexcept {
    if (this != &o) {
        if (lib_ != nullptr) driver().cuLibraryUnload(lib_);
        lib_ = std::exchange(o.lib_, nullptr);
    }
    return *this;
}

Kernel Library::kernel(const std::string& name) const {
    CUkernel k = nullptr;
    CUresult r = driver().cuLibraryGetKernel(&k, lib_, name.c_str());
    if (r != CUDA_SUCCESS) throw CudaError("cuLibraryGetKernel", r, "symbol " + name);
    return Kernel(k, name);
}

bool launch_overlap_enabled() {
    static const bool on = env::get_bool("KILN_LAUNCH_OVERLAP", true);
    return on;
}

void throw_launch_error(CUresult r, const char* kernel, const LaunchDims& d) {
    throw CudaLaunchError(r, kernel, d.grid, d.block, d.smem);
}

}  // namespace kiln::runtime
