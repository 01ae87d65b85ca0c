#include "jit/families/moe_w4a16_dequant.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(MoeW4A16DequantConfig, wide_scale, 0, 1, "MXFP4 scale bytes above 128 (device)"),
};
}  // namespace

std::span<const ConfigField> MoeW4A16DequantFamily::config_fields() const { return k_fields; }

KernelDescriptor MoeW4A16DequantFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = moe::canonical_start(k_name, in, true);
    Config c;
    if (!in.target.is_host() && in.weight_format == WeightFormat::mxfp4_g32_e8m0)
        c.wide_scale = in.config.as<Config>().wide_scale;
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource MoeW4A16DequantFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "moe_w4a16_dequant.cu";
    s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_dequant<{}, {}, 8>", moe::device_format(d.weight_format),
                              d.config.as<Config>().wide_scale != 0);
    s.source = fmt::format("// {}\n#include \"device/moe_w4a16_dequant.cuh\"\n", to_string(d));
    return s;
}

HostSource MoeW4A16DequantFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "moe_w4a16_dequant_host.cpp";
    s.entry = "kiln_moe_w4a16_dequant";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_w4a16.hpp\"\n"
        "extern \"C\" void kiln_moe_w4a16_dequant(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::moe::dequant<{}, {}, {}>(ctx, *static_cast<const kiln_params::moe::DequantParams*>(args));\n"
        "}}\n",
        to_string(d), moe::host_format(d.weight_format), d.n, moe::round_up(d.k, 64));
    return s;
}

KernelDescriptor MoeW4A16DequantFamily::descriptor(const moe::MatrixShape& w, Target target) {
    KernelDescriptor d = moe::matrix_descriptor(k_name, w, target);
    Config c;
    c.wide_scale = w.wide_scales ? 1 : 0;
    d.config = KernelConfig::of(c);
    return MoeW4A16DequantFamily().canonicalize(d);
}

void launch_moe_w4a16_dequant(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::DequantParams& p) {
    if (k.desc.family.view() != MoeW4A16DequantFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_dequant: kernel is {}", k.name));
    if (p.n_pad != k.desc.n || p.k_pad != moe::round_up(k.desc.k, 64))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_dequant: matrix [{}, {}] does not match kernel {}", p.n_pad,
                                          p.k_pad, k.name));
    runtime::LaunchDims dims;
    dims.grid = {128, 1, 1};
    dims.block = {256, 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
