// Device memory: an owning allocation (cuMemAlloc) and the copies and fills between host and device.
// Allocate with the owning Context current. Sync copies block the host; the *_async forms are ordered
// on the given stream, and their host memory must stay alive until the stream reaches them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda.h>

#include "runtime/tensor.hpp"

namespace kiln::runtime {

class Stream;

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = 0; o.n_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    CUdeviceptr ptr() const { return p_; }
    void* data() const { return reinterpret_cast<void*>(p_); }
    size_t size() const { return n_; }

    // A view of this buffer as a contiguous device tensor; throws if it does not fit.
    TensorView view(DType dtype, std::initializer_list<int64_t> shape, int device = 0) const;

private:
    CUdeviceptr p_ = 0;
    size_t n_ = 0;
};

void copy_h2d(CUdeviceptr dst, const void* src, size_t bytes);
void copy_d2h(void* dst, CUdeviceptr src, size_t bytes);
void copy_d2d(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
void copy_h2d_async(CUdeviceptr dst, const void* src, size_t bytes, const Stream& s);
void copy_d2h_async(void* dst, CUdeviceptr src, size_t bytes, const Stream& s);
void copy_d2d_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, const Stream& s);
void fill_u8(CUdeviceptr dst, uint8_t value, size_t count);
void fill_u32(CUdeviceptr dst, uint32_t value, size_t count);  // count of 32-bit words
void fill_u8_async(CUdeviceptr dst, uint8_t value, size_t count, const Stream& s);
void fill_u32_async(CUdeviceptr dst, uint32_t value, size_t count, const Stream& s);

// Convenience: a device buffer holding a copy of `host`, and a host copy of a device buffer.
template <typename T>
DeviceBuffer to_device(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    if (!host.empty()) copy_h2d(b.ptr(), host.data(), b.size());
    return b;
}
template <typename T>
std::vector<T> to_host(const DeviceBuffer& b) {
    std::vector<T> out(b.size() / sizeof(T));
    if (!out.empty()) copy_d2h(out.data(), b.ptr(), out.size() * sizeof(T));
    return out;
}

}  // namespace kiln::runtime
