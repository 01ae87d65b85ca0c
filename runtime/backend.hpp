// The backend interface: one vtable for the two places kernels run, the CUDA device (runtime/cuda/) and the
// host target (runtime/host/). Code above runtime/ allocates, copies, launches and times through these types
// only and so runs unchanged on either target.
//
//   Backend       memory (alloc), streams, events, device facts (compute units, name)
//   Buffer        an owning allocation; addr() is what kernels read: a device address or a host pointer
//   Stream        in-order queue: launch(kernel, dims, params), copies, fills, event record / wait
//   Event         a point in a stream; elapsed time between two recorded events of one backend
//   KernelHandle  a loaded kernel as its target launches it (a CUkernel, or a host entry point)
//
// A launch copies the parameter block at once (like CUDA kernel parameters): device kernels receive it as
// their one by-value argument, host kernels as `args` (runtime/host/kernel_abi.h). The struct is defined
// once in templates/common/ and compiled by NVRTC, the host JIT and kiln alike. Host memory given to
// upload / download must stay alive until the stream reaches the copy.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include <cuda.h>

#include "runtime/host/kernel_abi.h"
#include "runtime/tensor.hpp"

namespace kiln::runtime {

enum class BackendKind : uint8_t { cuda = 0, host = 1 };
const char* to_string(BackendKind k);  // "cuda", "host"

struct LaunchDims {
    std::array<uint32_t, 3> grid{1, 1, 1};
    std::array<uint32_t, 3> block{1, 1, 1};
    uint32_t smem = 0;  // dynamic shared memory, bytes (device); the host target sizes scratch per kernel
    // Programmatic dependent launch (device): the kernel may start while its predecessor in the stream still
    // runs and must execute `griddepcontrol.wait` before reading anything that kernel wrote.
    bool overlap_prior = false;
};

struct KernelHandle {
    BackendKind kind = BackendKind::cuda;
    CUkernel cuda = nullptr;                // device kernels
    kiln_host_entry host = nullptr;         // host kernels
    uint64_t host_scratch_bytes = 0;        // scratch memory a host launch provides
    const char* name = "";                  // for messages; owned by whoever loaded the kernel
    explicit operator bool() const { return cuda != nullptr || host != nullptr; }
};

class Backend;

class Buffer {
public:
    Buffer() = default;
    Buffer(Backend* owner, uint64_t addr, size_t bytes) : owner_(owner), addr_(addr), size_(bytes) {}
    ~Buffer() { reset(); }
    Buffer(Buffer&& o) noexcept : owner_(o.owner_), addr_(o.addr_), size_(o.size_) { o.release(); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    uint64_t addr() const { return addr_; }
    void* data() const { return reinterpret_cast<void*>(addr_); }
    template <typename T>
    T* as() const { return reinterpret_cast<T*>(addr_); }
    size_t size() const { return size_; }
    Backend* backend() const { return owner_; }
    explicit operator bool() const { return addr_ != 0; }

    // A contiguous tensor view of the buffer's start; throws InvalidArgument when it does not fit.
    TensorView view(DType dtype, std::initializer_list<int64_t> shape) const;
    void reset();

private:
    void release() { owner_ = nullptr; addr_ = 0; size_ = 0; }
    Backend* owner_ = nullptr;
    uint64_t addr_ = 0;
    size_t size_ = 0;
};

class Event {
public:
    virtual ~Event() = default;
    virtual BackendKind kind() const = 0;
    virtual void synchronize() const = 0;
    virtual bool query() const = 0;  // the most recent record has been reached (or none was made)
    // Milliseconds from `start` to this event, both recorded and completed on this backend.
    virtual double elapsed_ms_since(const Event& start) const = 0;
};

class Stream {
public:
    virtual ~Stream() = default;
    virtual Backend& backend() const = 0;
    BackendKind kind() const;

    virtual void launch(const KernelHandle& k, const LaunchDims& dims, const void* params, size_t bytes) = 0;
    template <typename P>
    void launch(const KernelHandle& k, const LaunchDims& dims, const P& params) {
        static_assert(std::is_trivially_copyable_v<P>, "kernel parameter blocks are copied as bytes");
        launch(k, dims, &params, sizeof params);
    }

    virtual void copy(uint64_t dst, uint64_t src, size_t bytes) = 0;            // within this backend's memory
    virtual void upload(uint64_t dst, const void* src, size_t bytes) = 0;       // host memory -> backend memory
    virtual void download(void* dst, uint64_t src, size_t bytes) = 0;           // backend memory -> host memory
    virtual void fill_u8(uint64_t dst, uint8_t value, size_t count) = 0;
    virtual void fill_u32(uint64_t dst, uint32_t value, size_t count) = 0;      // count of 32-bit words

    virtual void record(Event& e) = 0;
    virtual void wait(const Event& e) = 0;  // later work waits for e's most recent record
    virtual void synchronize() = 0;         // blocks until all enqueued work ran; rethrows a failure
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual BackendKind kind() const = 0;
    virtual std::string name() const = 0;   // "cuda:0 NVIDIA H200", "host (16 threads)"
    virtual int compute_units() const = 0;  // SMs, or host threads
    Location location() const { return kind() == BackendKind::cuda ? Location::device : Location::host; }
    // Makes the backend usable from the calling thread (the CUDA context is per thread); cheap, idempotent.
    virtual void make_current() const {}

    virtual Buffer alloc(size_t bytes) = 0;  // contents undefined; 0 bytes gives an empty buffer
    virtual std::unique_ptr<Stream> create_stream() = 0;
    virtual std::unique_ptr<Event> create_event(bool timing = true) = 0;
    // Synchronous copies (every stream's earlier work is not waited for: synchronize the stream first).
    virtual void upload(uint64_t dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, uint64_t src, size_t bytes) = 0;

protected:
    friend class Buffer;
    virtual void free(uint64_t addr, size_t bytes) noexcept = 0;
};

// A buffer holding a copy of `n` host bytes.
Buffer upload_buffer(Backend& b, const void* src, size_t n);

}  // namespace kiln::runtime
