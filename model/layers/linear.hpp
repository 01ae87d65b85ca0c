// One bf16 linear layer y[M, N] = x[M, K] · W[N, K]ᵀ (fp32 accumulation; bf16 or fp32 out) on any backend:
//
//   Linear layer(dispatcher, backend, {n, k, out}, tuning, cublaslt);
//   LinearPlan plan = layer.plan(m);          // host only; reuse it for every call of m rows
//   layer.run(plan, {x, w, y}, stream);
//
// plan() picks, by the tuning (autotune/heuristics/linear.hpp), cuBLASLt (CUDA only, when a handle is given,
// i.e. the library loaded, and it has an algorithm for the shape: plan() asks its heuristic) or the `linear`
// family with the tile for m; on the host target always the family.
// The layer keeps no buffer state: the weight is a view each run names. make_cublaslt() gives the handle
// to share between the layers of one backend, or null (logging why once) where cuBLASLt is missing or the
// backend is not CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "autotune/heuristics/linear.hpp"
#include "jit/dispatcher.hpp"
#include "jit/families/linear.hpp"
#include "runtime/backend.hpp"
#include "runtime/cuda/cublaslt.hpp"

namespace kiln::model::layers {

struct LinearShape {
    int64_t n = 0, k = 0;  // W [n, k]; k a multiple of 8
    jit::LinearOut out = jit::LinearOut::bf16;
};

enum class LinearPath : uint8_t { family = 0, cublaslt = 1 };
const char* to_string(LinearPath p);

struct LinearPlan {
    int64_t m = 0;
    LinearPath path = LinearPath::family;
    const jit::LoadedKernel* kernel = nullptr;  // the family path
};

std::shared_ptr<runtime::CublasLt> make_cublaslt(runtime::Backend& backend);

class Linear {
public:
    // Throws InvalidArgument for a bad shape or tuning.
    Linear(jit::Dispatcher& disp, runtime::Backend& backend, const LinearShape& shape, const autotune::LinearTuning& tuning,
           std::shared_ptr<runtime::CublasLt> cublaslt = nullptr);

    LinearPlan plan(int64_t m) const;
    // Checks the views against the plan and the shape (InvalidArgument; nothing is enqueued then), then runs.
    void run(const LinearPlan& p, const jit::LinearArgs& t, runtime::Stream& s) const;

    const LinearShape& shape() const { return shape_; }
    bool has_cublaslt() const { return cublaslt_ != nullptr; }

private:
    jit::Dispatcher& disp_;
    runtime::Backend& backend_;
    LinearShape shape_;
    autotune::LinearTuning tuning_;
    std::shared_ptr<runtime::CublasLt> cublaslt_;
};

}  // namespace kiln::model::layers
