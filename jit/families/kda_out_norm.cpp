#include "jit/families/kda_out_norm.hpp"

#include <fmt/format.h>

#include "jit/families/kda_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

KernelDescriptor KdaOutNormFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = kda::canonical_start(k_name, in);
    d.config = KernelConfig::of(Config{});
    return d;
}

DeviceSource KdaOutNormFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "kda_out_norm.cu";
    s.name_expr = fmt::format("&kiln_dev::kda::kda_out_norm<{}>", d.k);
    s.source = fmt::format("// {}\n#include \"device/kda_out_norm.cuh\"\n", to_string(d));
    return s;
}

HostSource KdaOutNormFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "kda_out_norm_host.cpp";
    s.entry = "kiln_kda_out_norm";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/kda.hpp\"\n"
        "extern \"C\" void kiln_kda_out_norm(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::kda::out_norm<{}>(ctx, *static_cast<const kiln_params::KdaOutNormParams*>(args));\n"
        "}}\n",
        to_string(d), d.k);
    return s;
}

KernelDescriptor KdaOutNormFamily::descriptor(int head_dim, Target target) {
    return KdaOutNormFamily().canonicalize(kda::base_descriptor(k_name, head_dim, target));
}

void launch_kda_out_norm(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaOutNormParams& p) {
    if (k.desc.family.view() != KdaOutNormFamily::k_name)
        throw InvalidArgument(fmt::format("launch_kda_out_norm: kernel is {}", k.name));
    if (p.num_tokens < 0 || p.heads < 1 || p.gate_stride < p.heads * k.desc.k || p.out_stride < p.heads * k.desc.k)
        throw InvalidArgument(fmt::format("launch_kda_out_norm: {} tokens, {} heads, strides {} / {}", p.num_tokens,
                                          p.heads, p.gate_stride, p.out_stride));
    if (p.num_tokens == 0) return;
    runtime::LaunchDims dims;
    const int64_t warps = static_cast<int64_t>(p.num_tokens) * p.heads;
    dims.grid = {static_cast<uint32_t>((warps + 3) / 4), 1, 1};
    dims.block = {128, 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
