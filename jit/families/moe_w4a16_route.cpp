#include "jit/families/moe_w4a16_route.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(MoeW4A16RouteConfig, block_m, 0, 192, "rows per m-block: 8, 16, 32, 64 (device: 128, 192 too)"),
};
}  // namespace

std::span<const ConfigField> MoeW4A16RouteFamily::config_fields() const { return k_fields; }

KernelDescriptor MoeW4A16RouteFamily::canonicalize(const KernelDescriptor& in) const {
    if (in.experts < 1 || in.experts > moe::k_max_experts)
        throw InvalidArgument(fmt::format("{}: experts={} must be in [1, {}]", k_name, in.experts, moe::k_max_experts));
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument(fmt::format("{}: takes no weights (weight format must be none)", k_name));
    KernelDescriptor d = moe::canonical_start(k_name, in, false);
    d.experts = in.experts;
    d.act_dtype = runtime::DType::i32;
    const int bm = in.config.as<Config>().block_m ? in.config.as<Config>().block_m : 8;
    const bool large = !in.target.is_host() && (bm == 128 || bm == 192);
    if (bm != 8 && bm != 16 && bm != 32 && bm != 64 && !large)
        throw InvalidArgument(fmt::format("{}: block_m={} must be 8, 16, 32 or 64{}", k_name, bm,
                                          in.target.is_host() ? "" : ", 128 or 192"));
    Config c;
    c.block_m = static_cast<uint16_t>(bm);
    d.config = KernelConfig::of(c);
    return d;
}

uint32_t MoeW4A16RouteFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    return static_cast<uint32_t>(3 * 4 * d.experts);
}

DeviceSource MoeW4A16RouteFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "moe_w4a16_route.cu";
    s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_routing<{}>", d.config.as<Config>().block_m);
    s.source = fmt::format("// {}\n#include \"device/moe_w4a16_routing.cuh\"\n", to_string(d));
    return s;
}

HostSource MoeW4A16RouteFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "moe_w4a16_route_host.cpp";
    s.entry = "kiln_moe_w4a16_route";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_w4a16.hpp\"\n"
        "extern \"C\" void kiln_moe_w4a16_route(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::moe::routing<{}, {}>(ctx, *static_cast<const kiln_params::moe::RoutingParams*>(args));\n"
        "}}\n",
        to_string(d), d.experts, d.config.as<Config>().block_m);
    return s;
}

KernelDescriptor MoeW4A16RouteFamily::descriptor(int experts, int block_m, Target target) {
    KernelDescriptor d = moe::base_descriptor(k_name, target);
    d.experts = experts;
    Config c;
    c.block_m = static_cast<uint16_t>(block_m);
    d.config = KernelConfig::of(c);
    return MoeW4A16RouteFamily().canonicalize(d);
}

int moe_w4a16_route_ctas(int64_t slots) { return static_cast<int>(std::clamp<int64_t>(slots / 2048, 1, 32)); }

void launch_moe_w4a16_route(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::RoutingParams& p) {
    if (k.desc.family.view() != MoeW4A16RouteFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_route: kernel is {}", k.name));
    if (p.num_experts != k.desc.experts)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_route: {} experts, kernel built for {}", p.num_experts,
                                          k.desc.experts));
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(moe_w4a16_route_ctas(static_cast<int64_t>(p.num_tokens) * p.topk)), 1, 1};
    dims.block = {1024, 1, 1};
    dims.smem = k.dynamic_smem;
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
