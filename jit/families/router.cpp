#include "jit/families/router.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"sigmoid_topk"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(RouterConfig, warps, 0, 32, "device: token rows per CTA, one warp each (default 4)"),
};
}  // namespace

std::span<const ConfigField> RouterFamily::config_fields() const { return k_fields; }

KernelDescriptor RouterFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument("router: takes no quantised weights (weight format must be none)");
    if (in.act_dtype != DType::none && in.act_dtype != DType::f32)
        throw InvalidArgument("router: logits must be f32");
    if (in.experts < 1 || in.experts > k_max_experts)
        throw InvalidArgument(fmt::format("router: experts={} must be in [1, {}]", in.experts, k_max_experts));
    if (in.topk < 1 || in.topk > std::min(in.experts, k_max_topk))
        throw InvalidArgument(fmt::format("router: topk={} must be in [1, min(experts, {})]", in.topk, k_max_topk));
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    d.act_dtype = DType::f32;
    d.experts = in.experts;
    d.topk = in.topk;
    const int w = in.config.as<Config>().warps ? in.config.as<Config>().warps : 4;
    if (w < 1 || w > 32) throw InvalidArgument(fmt::format("router: warps={} must be in [1, 32]", w));
    Config c;
    c.warps = static_cast<uint8_t>(in.target.is_host() ? 0 : w);
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource RouterFamily::device_source(const KernelDescriptor& d) const {
    return dense::device_entry(
        d, "device/router.cuh",
        fmt::format("&kiln_dev::router<{}, {}, {}>", d.experts, d.topk, d.config.as<Config>().warps));
}

HostSource RouterFamily::host_source(const KernelDescriptor& d) const {
    return dense::host_entry(d, "host/router.hpp", "kiln_router_sigmoid_topk", "RouterParams",
                             fmt::format("kiln_host::router<{}, {}>", d.experts, d.topk));
}

KernelDescriptor RouterFamily::descriptor(int experts, int topk, Target target, int warps) {
    KernelDescriptor d = dense::base(k_name, 0, k_modes, target);
    d.act_dtype = DType::f32;
    d.experts = experts;
    d.topk = topk;
    Config c;
    c.warps = static_cast<uint8_t>(warps);
    d.config = KernelConfig::of(c);
    return RouterFamily().canonicalize(d);
}

kiln_params::RouterParams router_params(const LoadedKernel& k, const RouterArgs& a, Location where) {
    dense::expect_family(k, RouterFamily::k_name);
    const int E = k.desc.experts, K = k.desc.topk;
    runtime::expect_tensor(a.logits, "router logits", DType::f32, 2, where);
    runtime::expect_shape(a.logits, "router logits", {-1, E});
    const int64_t M = a.logits.shape[0];
    runtime::expect_tensor(a.topk_ids, "router topk_ids", DType::i32, 2, where);
    runtime::expect_shape(a.topk_ids, "router topk_ids", {M, K});
    runtime::expect_tensor(a.topk_weights, "router topk_weights", DType::f32, 2, where);
    runtime::expect_shape(a.topk_weights, "router topk_weights", {M, K});
    if (M > INT32_MAX) throw InvalidArgument("router: too many rows");
    kiln_params::RouterParams p{};
    if (a.bias.data) {
        runtime::expect_tensor(a.bias, "router bias", DType::f32, 1, where);
        runtime::expect_shape(a.bias, "router bias", {E});
        p.bias = a.bias.ptr<const float>();
    }
    p.logits = a.logits.ptr<const float>();
    p.topk_ids = a.topk_ids.ptr<int32_t>();
    p.topk_weights = a.topk_weights.ptr<float>();
    p.rows = static_cast<int32_t>(M);
    p.renormalize = a.renormalize ? 1 : 0;
    p.scale = a.routed_scaling_factor;
    return p;
}

void launch_router(const LoadedKernel& k, runtime::Stream& stream, const RouterArgs& a) {
    const kiln_params::RouterParams p = router_params(k, a, stream.backend().location());
    if (p.rows == 0) return;
    const uint32_t w = k.desc.config.as<RouterConfig>().warps;
    runtime::LaunchDims dims;
    dims.block = {w ? w * 32 : 1, 1, 1};
    dims.grid = {w ? static_cast<uint32_t>((p.rows + w - 1) / w) : 1, 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
