#include "model/layers/linear.hpp"

#include <mutex>

#include <fmt/format.h>

#include "runtime/cuda/backend.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace kiln::model::layers {

using runtime::DType;

const char* to_string(LinearPath p) { return p == LinearPath::cublaslt ? "cublaslt" : "family"; }

std::shared_ptr<runtime::CublasLt> make_cublaslt(runtime::Backend& backend) {
    auto* cuda = dynamic_cast<runtime::CudaBackend*>(&backend);
    if (cuda == nullptr) return nullptr;
    const runtime::CublasLtStatus& st = runtime::cublaslt_status();
    if (!st.ready) {
        static std::once_flag once;
        std::call_once(once, [&] { log::info("{}: linear layers run the linear kernel family", st.reason); });
        return nullptr;
    }
    return std::make_shared<runtime::CublasLt>(*cuda);
}

Linear::Linear(jit::Dispatcher& disp, runtime::Backend& backend, const LinearShape& shape,
               const autotune::LinearTuning& tuning, std::shared_ptr<runtime::CublasLt> cublaslt)
    : disp_(disp), backend_(backend), shape_(shape), tuning_(tuning), cublaslt_(std::move(cublaslt)) {
    if (shape.n < 1 || shape.k < 8 || shape.k % 8 != 0)
        throw InvalidArgument(fmt::format("linear layer: W [{}, {}] (k a positive multiple of 8)", shape.n, shape.k));
    autotune::validate(tuning_);
    if (backend.kind() != runtime::BackendKind::cuda || !tuning_.cublaslt) cublaslt_.reset();
}

LinearPlan Linear::plan(int64_t m) const {
    if (m < 0) throw InvalidArgument(fmt::format("linear layer: {} rows", m));
    LinearPlan p;
    p.m = m;
    const DType yd = shape_.out == jit::LinearOut::f32 ? DType::f32 : DType::bf16;
    if (cublaslt_ && m >= tuning_.cublaslt_min_m && m > 0 && cublaslt_->prepare(yd, m, shape_.n, shape_.k)) {
        p.path = LinearPath::cublaslt;
        return p;
    }
    const bool host = backend_.kind() == runtime::BackendKind::host;
    const jit::Target target = host ? jit::Target::host_target() : disp_.device_target();
    const autotune::LinearTile t = host ? autotune::LinearTile{} : autotune::linear_tile(tuning_, m);
    p.kernel = &disp_.get(jit::LinearFamily::descriptor(shape_.out, target, t.block_m, t.block_n, t.warps_m, t.warps_n));
    return p;
}

void Linear::run(const LinearPlan& p, const jit::LinearArgs& t, runtime::Stream& s) const {
    const DType yd = shape_.out == jit::LinearOut::f32 ? DType::f32 : DType::bf16;
    const runtime::Location where = s.backend().location();
    runtime::expect_tensor(t.x, "linear layer x", DType::bf16, 2, where);
    runtime::expect_shape(t.x, "linear layer x", {p.m, shape_.k});
    runtime::expect_tensor(t.w, "linear layer w", DType::bf16, 2, where);
    runtime::expect_shape(t.w, "linear layer w", {shape_.n, shape_.k});
    runtime::expect_tensor(t.y, "linear layer y", yd, 2, where);
    runtime::expect_shape(t.y, "linear layer y", {p.m, shape_.n});
    if (p.path == LinearPath::cublaslt) {
        if (!cublaslt_) throw InvalidArgument("linear layer: a cuBLASLt plan on a layer without cuBLASLt");
        cublaslt_->linear(s, reinterpret_cast<uint64_t>(t.x.data), reinterpret_cast<uint64_t>(t.w.data),
                          reinterpret_cast<uint64_t>(t.y.data), yd, p.m, shape_.n, shape_.k);
        return;
    }
    if (p.m == 0) return;
    jit::launch_linear(*p.kernel, s, t);
}

}  // namespace kiln::model::layers
