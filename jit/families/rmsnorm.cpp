#include "jit/families/rmsnorm.hpp"

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"rows", "add", "heads"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(RmsNormConfig, threads, 0, 1024, "device CTA threads (default 256)"),
};
}  // namespace

std::span<const ConfigField> RmsNormFamily::config_fields() const { return k_fields; }

KernelDescriptor RmsNormFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    dense::require_bf16(k_name, in);
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    Config c;
    c.threads = dense::threads(k_name, in.config.as<Config>().threads, 256, in.target);
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource RmsNormFamily::device_source(const KernelDescriptor& d) const {
    const int mode = dense::mode_index(k_name, d, k_modes);
    const int t = d.config.as<Config>().threads;
    return dense::device_entry(d, "device/rmsnorm.cuh",
                               mode == 2 ? fmt::format("&kiln_dev::rmsnorm_heads<{}>", t)
                                         : fmt::format("&kiln_dev::rmsnorm_rows<{}, {}>", mode, t));
}

HostSource RmsNormFamily::host_source(const KernelDescriptor& d) const {
    const int mode = dense::mode_index(k_name, d, k_modes);
    return dense::host_entry(d, "host/rmsnorm.hpp", fmt::format("kiln_rmsnorm_{}", k_modes[mode]), "RmsNormParams",
                             fmt::format("kiln_host::rmsnorm<{}>", mode));
}

KernelDescriptor RmsNormFamily::descriptor(RmsNormMode mode, Target target, int threads) {
    KernelDescriptor d = dense::base(k_name, static_cast<int>(mode), k_modes, target);
    Config c;
    c.threads = static_cast<uint16_t>(threads);
    d.config = KernelConfig::of(c);
    return RmsNormFamily().canonicalize(d);
}

kiln_params::RmsNormParams rmsnorm_params(const LoadedKernel& k, const RmsNormArgs& a, Location where) {
    dense::expect_family(k, RmsNormFamily::k_name);
    const auto mode = static_cast<RmsNormMode>(dense::mode_index(RmsNormFamily::k_name, k.desc, k_modes));
    runtime::expect_tensor(a.x, "rmsnorm x", DType::bf16, 2, where);
    const int64_t rows = a.x.shape[0], cols = a.x.shape[1];
    runtime::expect_tensor(a.y, "rmsnorm y", DType::bf16, 2, where);
    runtime::expect_shape(a.y, "rmsnorm y", {rows, cols});
    runtime::expect_tensor(a.weight, "rmsnorm weight", DType::bf16, 1, where);
    const int64_t group = mode == RmsNormMode::heads ? a.weight.shape[0] : cols;
    if (mode != RmsNormMode::heads) runtime::expect_shape(a.weight, "rmsnorm weight", {cols});
    if (group < 1 || cols % group != 0)
        throw InvalidArgument(fmt::format("rmsnorm heads: {} columns are not whole heads of {}", cols, group));
    if (rows > INT32_MAX || cols > INT32_MAX || rows * (cols / group) > INT32_MAX * int64_t(8))
        throw InvalidArgument(fmt::format("rmsnorm: [{}, {}] is too large", rows, cols));
    if (!(a.eps > 0.0f)) throw InvalidArgument(fmt::format("rmsnorm: eps={} must be positive", a.eps));
    kiln_params::RmsNormParams p{};
    if (mode == RmsNormMode::add) {
        runtime::expect_tensor(a.residual, "rmsnorm residual", DType::bf16, 2, where);
        runtime::expect_shape(a.residual, "rmsnorm residual", {rows, cols});
        runtime::expect_tensor(a.sum, "rmsnorm sum", DType::bf16, 2, where);
        runtime::expect_shape(a.sum, "rmsnorm sum", {rows, cols});
        p.residual = a.residual.ptr<const kiln_params::bf16>();
        p.sum = a.sum.ptr<kiln_params::bf16>();
    }
    if (mode == RmsNormMode::heads && a.gate.data) {
        runtime::expect_tensor(a.gate, "rmsnorm gate", DType::bf16, 2, where);
        runtime::expect_shape(a.gate, "rmsnorm gate", {rows, cols});
        p.gate = a.gate.ptr<const kiln_params::bf16>();
    }
    p.x = a.x.ptr<const kiln_params::bf16>();
    p.weight = a.weight.ptr<const kiln_params::bf16>();
    p.y = a.y.ptr<kiln_params::bf16>();
    p.rows = static_cast<int32_t>(rows);
    p.cols = static_cast<int32_t>(cols);
    p.group = static_cast<int32_t>(group);
    p.eps = a.eps;
    return p;
}

void launch_rmsnorm(const LoadedKernel& k, runtime::Stream& stream, const RmsNormArgs& a) {
    const kiln_params::RmsNormParams p = rmsnorm_params(k, a, stream.backend().location());
    if (p.rows == 0) return;
    const uint32_t t = k.desc.config.as<RmsNormConfig>().threads;
    runtime::LaunchDims dims;
    dims.block = {t ? t : 1, 1, 1};
    if (k.desc.mode.view() == "heads") {
        const int64_t groups = int64_t(p.rows) * (p.cols / p.group), per = t ? t / 32 : 1;
        dims.grid = {static_cast<uint32_t>((groups + per - 1) / per), 1, 1};
    } else {
        dims.grid = {static_cast<uint32_t>(p.rows), 1, 1};
    }
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
