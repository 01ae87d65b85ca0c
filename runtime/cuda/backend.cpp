#include "runtime/cuda/backend.hpp"

#include <fmt/format.h>

#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/stream.hpp"

namespace kiln::runtime {

CudaBackend::CudaBackend(int ordinal) : ctx_(ordinal), props_(device_props(ordinal)) {}

std::string CudaBackend::name() const { return fmt::format("cuda:{} {}", props_.ordinal, props_.name); }

Buffer CudaBackend::alloc(size_t bytes) {
    if (bytes == 0) return {};
    ctx_.make_current();
    CUdeviceptr p = 0;
    CUresult r = driver().cuMemAlloc(&p, bytes);
    if (r != CUDA_SUCCESS) throw CudaError("cuMemAlloc", r, fmt::format("{} bytes", bytes));
    return Buffer(this, p, bytes);
}

void CudaBackend::free(uint64_t addr, size_t) noexcept {
    if (addr != 0) driver().cuMemFree(addr);
}

std::unique_ptr<Stream> CudaBackend::create_stream() { return std::make_unique<CudaStream>(*this); }

std::unique_ptr<Event> CudaBackend::create_event(bool timing) {
    ctx_.make_current();
    return std::make_unique<CudaEvent>(timing);
}

void CudaBackend::upload(uint64_t dst, const void* src, size_t bytes) {
    ctx_.make_current();
    if (bytes) cu_check(driver().cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void CudaBackend::download(void* dst, uint64_t src, size_t bytes) {
    ctx_.make_current();
    if (bytes) cu_check(driver().cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

}  // namespace kiln::runtime
