#include "runtime/cuda/stream.hpp"

#include <utility>

#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/library.hpp"
#include "runtime/error.hpp"

namespace kiln::runtime {

CudaStream::CudaStream(CudaBackend& backend) : backend_(backend) {
    backend.context().make_current();
    cu_check(driver().cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

CudaStream::~CudaStream() {
    if (s_ != nullptr) driver().cuStreamDestroy(s_);
}

Backend& CudaStream::backend() const { return backend_; }

void CudaStream::launch(const KernelHandle& k, const LaunchDims& dims, const void* params, size_t bytes) {
    if (k.kind != BackendKind::cuda || k.cuda == nullptr) [[unlikely]]
        throw InvalidArgument(std::string("launch on a CUDA stream: kernel ") + k.name + " is not a device kernel");
    void* arg = const_cast<void*>(params);
    void* args[1] = {arg};
    launch_kernel(k, dims, s_, bytes == 0 ? nullptr : args);
}

void CudaStream::copy(uint64_t dst, uint64_t src, size_t bytes) {
    if (bytes) cu_check(driver().cuMemcpyDtoDAsync(dst, src, bytes, s_), "cuMemcpyDtoDAsync");
}
void CudaStream::upload(uint64_t dst, const void* src, size_t bytes) {
    if (bytes) cu_check(driver().cuMemcpyHtoDAsync(dst, src, bytes, s_), "cuMemcpyHtoDAsync");
}
void CudaStream::download(void* dst, uint64_t src, size_t bytes) {
    if (bytes) cu_check(driver().cuMemcpyDtoHAsync(dst, src, bytes, s_), "cuMemcpyDtoHAsync");
}
void CudaStream::fill_u8(uint64_t dst, uint8_t value, size_t count) {
    if (count) cu_check(driver().cuMemsetD8Async(dst, value, count, s_), "cuMemsetD8Async");
}
void CudaStream::fill_u32(uint64_t dst, uint32_t value, size_t count) {
    if (count) cu_check(driver().cuMemsetD32Async(dst, value, count, s_), "cuMemsetD32Async");
}

static const CudaEvent& as_cuda(const Event& e) {
    if (e.kind() != BackendKind::cuda) throw InvalidArgument("a CUDA stream was given an event of the host backend");
    return static_cast<const CudaEvent&>(e);
}

void CudaStream::record(Event& e) {
    as_cuda(e);
    static_cast<CudaEvent&>(e).record(*this);
}
void CudaStream::wait(const Event& e) {
    cu_check(driver().cuStreamWaitEvent(s_, as_cuda(e).handle(), 0), "cuStreamWaitEvent");
}
void CudaStream::synchronize() { cu_check(driver().cuStreamSynchronize(s_), "cuStreamSynchronize"); }

void CudaStream::begin_capture() {
    cu_check(driver().cuStreamBeginCapture(s_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
}

CudaStream::Graph CudaStream::end_capture() {
    Graph g;
    cu_check(driver().cuStreamEndCapture(s_, &g.g_), "cuStreamEndCapture");
    cu_check(driver().cuGraphInstantiateWithFlags(&g.exec_, g.g_, 0), "cuGraphInstantiateWithFlags");
    return g;
}

CudaStream::Graph::~Graph() {
    if (exec_ != nullptr) driver().cuGraphExecDestroy(exec_);
    if (g_ != nullptr) driver().cuGraphDestroy(g_);
}

CudaStream::Graph& CudaStream::Graph::operator=(Graph&& o) noexcept {
    if (this != &o) {
        this->~Graph();
        g_ = std::exchange(o.g_, nullptr);
        exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
}

void CudaStream::Graph::launch(const CudaStream& s) const {
    cu_check(driver().cuGraphLaunch(exec_, s.handle()), "cuGraphLaunch");
}

CudaEvent::CudaEvent(bool timing) {
    cu_check(driver().cuEventCreate(&e_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
}

CudaEvent::~CudaEvent() {
    if (e_ != nullptr) driver().cuEventDestroy(e_);
}

void CudaEvent::record(const CudaStream& s) { cu_check(driver().cuEventRecord(e_, s.handle()), "cuEventRecord"); }
void CudaEvent::synchronize() const { cu_check(driver().cuEventSynchronize(e_), "cuEventSynchronize"); }

bool CudaEvent::query() const {
    CUresult r = driver().cuEventQuery(e_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    cu_check(r, "cuEventQuery");
    return true;
}

double CudaEvent::elapsed_ms_since(const Event& start) const { return elapsed_ms(as_cuda(start), *this); }

float CudaEvent::elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
    float ms = 0;
    cu_check(driver().cuEventElapsedTime(&ms, start.e_, end.e_), "cuEventElapsedTime");
    return ms;
}

CUstream cuda_stream(const Stream& s) {
    if (s.kind() != BackendKind::cuda) throw InvalidArgument("expected a stream of the CUDA backend, got a host stream");
    return static_cast<const CudaStream&>(s).handle();
}

}  // namespace kiln::runtime
