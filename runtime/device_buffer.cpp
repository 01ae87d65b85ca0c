#include "runtime/device_buffer.hpp"

#include <utility>

#include <fmt/format.h>

#include "runtime/cuda_driver.hpp"
#include "runtime/stream.hpp"

namespace kiln::runtime {

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
    if (bytes == 0) return;
    CUresult r = driver().cuMemAlloc(&p_, bytes);
    if (r != CUDA_SUCCESS) throw CudaError("cuMemAlloc", r, fmt::format("{} bytes", bytes));
}

DeviceBuffer::~DeviceBuffer() {
    if (p_ != 0) driver().cuMemFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        if (p_ != 0) driver().cuMemFree(p_);
        p_ = std::exchange(o.p_, 0);
        n_ = std::exchange(o.n_, 0);
    }
    return *this;
}

TensorView DeviceBuffer::view(DType dtype, std::initializer_list<int64_t> shape, int device) const {
    TensorView v = TensorView::contiguous(data(), dtype, shape, Location::device, device);
    if (v.bytes() > n_)
        throw InvalidArgument(fmt::format("tensor {} needs {} bytes but the buffer holds {}", v.describe(), v.bytes(), n_));
    return v;
}

void copy_h2d(CUdeviceptr dst, const void* src, size_t bytes) { cu_check(driver().cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD"); }
void copy_d2h(void* dst, CUdeviceptr src, size_t bytes) { cu_check(driver().cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH"); }
void copy_d2d(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { cu_check(driver().cuMemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD"); }

void copy_h2d_async(CUdeviceptr dst, const void* src, size_t bytes, const Stream& s) {
    cu_check(driver().cuMemcpyHtoDAsync(dst, src, bytes, s.handle()), "cuMemcpyHtoDAsync");
}
void copy_d2h_async(void* dst, CUdeviceptr src, size_t bytes, const Stream& s) {
    cu_check(driver().cuMemcpyDtoHAsync(dst, src, bytes, s.handle()), "cuMemcpyDtoHAsync");
}
void copy_d2d_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, const Stream& s) {
    cu_check(driver().cuMemcpyDtoDAsync(dst, src, bytes, s.handle()), "cuMemcpyDtoDAsync");
}

void fill_u8(CUdeviceptr dst, uint8_t value, size_t count) { cu_check(driver().cuMemsetD8(dst, value, count), "cuMemsetD8"); }
void fill_u32(CUdeviceptr dst, uint32_t value, size_t count) { cu_check(driver().cuMemsetD32(dst, value, count), "cuMemsetD32"); }
void fill_u8_async(CUdeviceptr dst, uint8_t value, size_t count, const Stream& s) {
    cu_check(driver().cuMemsetD8Async(dst, value, count, s.handle()), "cuMemsetD8Async");
}
void fill_u32_async(CUdeviceptr dst, uint32_t value, size_t count, const Stream& s) {
    cu_check(driver().cuMemsetD32Async(dst, value, count, s.handle()), "cuMemsetD32Async");
}

}  // namespace kiln::runtime
