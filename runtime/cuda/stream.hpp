// The CUDA implementation of Stream and Event (RAII over CUstream / CUevent), and graph capture.
// Create them through a CudaBackend (runtime/cuda/backend.hpp), which makes its context current first.
#pragma once

#include <cuda.h>

#include "runtime/backend.hpp"

namespace kiln::runtime {

class CudaBackend;

class CudaStream final : public Stream {
public:
    explicit CudaStream(CudaBackend& backend);  // a non-blocking stream in the backend's context
    ~CudaStream() override;
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;

    Backend& backend() const override;
    CUstream handle() const { return s_; }

    void launch(const KernelHandle& k, const LaunchDims& dims, const void* params, size_t bytes) override;
    using Stream::launch;
    void copy(uint64_t dst, uint64_t src, size_t bytes) override;
    void upload(uint64_t dst, const void* src, size_t bytes) override;
    void download(void* dst, uint64_t src, size_t bytes) override;
    void fill_u8(uint64_t dst, uint8_t value, size_t count) override;
    void fill_u32(uint64_t dst, uint32_t value, size_t count) override;
    void record(Event& e) override;
    void wait(const Event& e) override;
    void synchronize() override;

    // Graph capture of the work enqueued between begin_capture and end_capture, then replay.
    void begin_capture();
    class Graph;
    Graph end_capture();

private:
    CudaBackend& backend_;
    CUstream s_ = nullptr;
};

// An instantiated graph captured from a stream.
class CudaStream::Graph {
public:
    Graph() = default;
    ~Graph();
    Graph(Graph&& o) noexcept : g_(o.g_), exec_(o.exec_) { o.g_ = nullptr; o.exec_ = nullptr; }
    Graph& operator=(Graph&&) noexcept;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    void launch(const CudaStream& s) const;

private:
    friend class CudaStream;
    CUgraph g_ = nullptr;
    CUgraphExec exec_ = nullptr;
};

class CudaEvent final : public Event {
public:
    explicit CudaEvent(bool timing = true);
    ~CudaEvent() override;
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;

    BackendKind kind() const override { return BackendKind::cuda; }
    void record(const CudaStream& s);
    void synchronize() const override;
    bool query() const override;
    double elapsed_ms_since(const Event& start) const override;
    CUevent handle() const { return e_; }

    // Milliseconds between two recorded (and completed) events.
    static float elapsed_ms(const CudaEvent& start, const CudaEvent& end);

private:
    CUevent e_ = nullptr;
};

// The CUstream behind a stream of the CUDA backend; throws InvalidArgument for a host stream.
CUstream cuda_stream(const Stream& s);

}  // namespace kiln::runtime
