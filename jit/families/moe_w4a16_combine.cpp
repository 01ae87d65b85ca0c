#include "jit/families/moe_w4a16_combine.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/moe_w4a16_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

KernelDescriptor MoeW4A16CombineFamily::canonicalize(const KernelDescriptor& in) const {
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument(fmt::format("{}: takes no weights (weight format must be none)", k_name));
    KernelDescriptor d = moe::canonical_start(k_name, in, false);
    d.act_dtype = runtime::DType::bf16;
    return d;
}

DeviceSource MoeW4A16CombineFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "moe_w4a16_combine.cu";
    s.name_expr = "&kiln_dev::moe::moe_w4a16_combine";
    s.source = fmt::format("// {}\n#include \"device/moe_w4a16_combine.cuh\"\n", to_string(d));
    return s;
}

HostSource MoeW4A16CombineFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "moe_w4a16_combine_host.cpp";
    s.entry = "kiln_moe_w4a16_combine";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_w4a16.hpp\"\n"
        "extern \"C\" void kiln_moe_w4a16_combine(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::moe::combine(ctx, *static_cast<const kiln_params::moe::CombineParams*>(args));\n"
        "}}\n",
        to_string(d));
    return s;
}

KernelDescriptor MoeW4A16CombineFamily::descriptor(Target target) {
    return MoeW4A16CombineFamily().canonicalize(moe::base_descriptor(k_name, target));
}

void launch_moe_w4a16_combine(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::CombineParams& p) {
    if (k.desc.family.view() != MoeW4A16CombineFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_combine: kernel is {}", k.name));
    if (p.num_tokens < 0 || p.topk < 1 || p.n < 1)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_combine: {} tokens, topk {}, {} columns", p.num_tokens,
                                          p.topk, p.n));
    if (p.num_tokens == 0) return;
    runtime::LaunchDims dims;
    const int64_t items = static_cast<int64_t>(p.num_tokens) * ((p.n + 1023) / 1024);
    dims.grid = {static_cast<uint32_t>(std::min<int64_t>(items, 16 * std::max(1, stream.backend().compute_units()))), 1, 1};
    dims.block = {128, 1, 1};
    dims.overlap_prior = true;  // the kernel waits for its predecessor (griddepcontrol.wait)
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
