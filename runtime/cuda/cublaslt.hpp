// cuBLASLt, reached without linking it: dlopen of libcublasLt.so.13 (or .12), searched like the CUDA
// driver and NVRTC: $KILN_CUBLASLT (a path, or "none" to turn it off), $KILN_CUDA_HOME, $CUDA_HOME and
// /usr/local/cuda (lib64/, lib/), the system loader, then NVIDIA's pip wheels (nvidia/cu13/lib,
// nvidia/cublas/lib) in $VIRTUAL_ENV and in a .venv next to the executable or up to four directories
// above it. It is optional: cublaslt_status() never throws and says why it is missing; callers fall back
// to the `linear` kernel family.
//
// CublasLt is a small typed wrapper for the one GEMM kiln needs from it: y[M, N] = x[M, K] · W[N, K]ᵀ,
// row-major bf16 inputs, fp32 compute, bf16 or fp32 output, enqueued on a CudaStream. It owns a handle and
// a workspace; the matmul descriptor, the three layouts and the heuristic's first algorithm are built once
// per (M, N, K, output type) and cached (thread-safe). Calls on one CublasLt share its workspace, so they
// must be ordered on one stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/backend.hpp"
#include "runtime/error.hpp"

namespace kiln::runtime {

class CudaBackend;

// cuBLASLt is not usable here; what() says why (library missing, entry point missing).
class CublasLtUnavailable : public Error {
public:
    using Error::Error;
};

// A cuBLASLt call failed: the call's name and the cublasStatus_t.
class CublasLtError : public Error {
public:
    CublasLtError(std::string call, int status);
    int status() const { return status_; }

private:
    int status_;
};

struct CublasLtStatus {
    bool ready = false;
    std::string reason;   // one line; empty when ready
    std::string library;  // what was dlopen'ed
    size_t version = 0;   // cublasLtGetVersion(), e.g. 130100
};

// Loads the library on first call (thread-safe); never throws.
const CublasLtStatus& cublaslt_status();
// dlopen() candidates in search order.
std::vector<std::string> cublaslt_library_candidates();

class CublasLt {
public:
    // Throws CublasLtUnavailable without the library, CublasLtError when the handle cannot be created.
    explicit CublasLt(CudaBackend& backend, size_t workspace_bytes = size_t(32) << 20);
    ~CublasLt();
    CublasLt(const CublasLt&) = delete;
    CublasLt& operator=(const CublasLt&) = delete;

    // y = x · wᵀ on `stream` (a stream of this backend). x bf16 [m, k], w bf16 [n, k], y `y_dtype` (bf16 or
    // f32) [m, n], all row-major and contiguous at device addresses. Throws InvalidArgument for another
    // stream kind or dtype, CublasLtError when cuBLASLt has no algorithm or the call fails.
    void linear(Stream& stream, uint64_t x, uint64_t w, uint64_t y, DType y_dtype, int64_t m, int64_t n, int64_t k);

    // Builds (and caches) the plan of a shape ahead of its calls; false when cuBLASLt has no algorithm for it
    // (the reason is logged at debug level). Host work only.
    bool prepare(DType y_dtype, int64_t m, int64_t n, int64_t k);

    size_t cached_plans() const;
    size_t workspace_bytes() const { return workspace_.size(); }

private:
    struct Plan;
    const Plan& plan(DType y_dtype, int64_t m, int64_t n, int64_t k);

    CudaBackend& backend_;
    void* handle_ = nullptr;
    Buffer workspace_;
    mutable std::mutex mu_;
    std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace kiln::runtime
