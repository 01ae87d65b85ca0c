#include "jit/families/mla_combine.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/mla_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

KernelDescriptor MlaCombineFamily::canonicalize(const KernelDescriptor& in) const {
    return mla::canonical_start(k_name, in, {"pieces"});
}

DeviceSource MlaCombineFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "mla_combine.cu";
    s.name_expr = "&kiln_dev::mla::mla_combine";
    s.source = fmt::format("// {}\n#include \"device/mla_combine.cuh\"\n", to_string(d));
    return s;
}

HostSource MlaCombineFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "mla_combine_host.cpp";
    s.entry = "kiln_mla_combine";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/mla.hpp\"\n"
        "extern \"C\" void kiln_mla_combine(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::mla::combine(ctx, *static_cast<const kiln_params::mla::CombineParams*>(args));\n"
        "}}\n",
        to_string(d));
    return s;
}

KernelDescriptor MlaCombineFamily::descriptor(Target target) {
    return MlaCombineFamily().canonicalize(mla::base_descriptor(k_name, "pieces", target));
}

void launch_mla_combine(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::CombineParams& p) {
    if (k.desc.family.view() != MlaCombineFamily::k_name)
        throw InvalidArgument(fmt::format("launch_mla_combine: kernel is {}", k.name));
    if (p.splits < 1 || p.splits > mla::k_max_pieces || p.split_keys < mla::k_piece_align ||
        p.split_keys % mla::k_piece_align != 0 || p.d_c < 4 || p.d_c % 4 != 0 || p.heads < 1 || p.num_tokens < 0)
        throw InvalidArgument(fmt::format("launch_mla_combine: splits={} (1..{}), split_keys={} (multiple of {}), "
                                          "d_c={} (multiple of 4), heads={}, tokens={}",
                                          p.splits, mla::k_max_pieces, p.split_keys, mla::k_piece_align, p.d_c,
                                          p.heads, p.num_tokens));
    if (p.num_tokens == 0) return;
    const int64_t rows = int64_t(p.num_tokens) * p.heads;
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(std::min<int64_t>(rows, 32 * std::max(1, stream.backend().compute_units()))), 1, 1};
    dims.block = {128, 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
