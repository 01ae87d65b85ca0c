#include "jit/families/kda_decode.hpp"

#include <fmt/format.h>

#include "jit/families/kda_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(KdaDecodeConfig, v_split, 0, 4, "CTAs per (sequence, head): 1, 2 or 4 (device)"),
};
constexpr int k_threads = 128;
}  // namespace

std::span<const ConfigField> KdaDecodeFamily::config_fields() const { return k_fields; }

KernelDescriptor KdaDecodeFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = kda::canonical_start(k_name, in);
    const Config c = in.config.as<Config>();
    Config out;
    if (!in.target.is_host()) {
        const int vs = c.v_split ? c.v_split : 2;
        if (vs != 1 && vs != 2 && vs != 4)
            throw InvalidArgument(fmt::format("{}: v_split={} must be 1, 2 or 4", k_name, vs));
        // 128 threads of 4 columns each: at most K row groups.
        const int row_groups = k_threads / (in.k / vs / 4);
        if (row_groups > in.k)
            throw InvalidArgument(fmt::format("{}: v_split={} splits head dim {} too finely", k_name, vs, in.k));
        out.v_split = static_cast<uint8_t>(vs);
    }
    d.config = KernelConfig::of(out);
    return d;
}

DeviceSource KdaDecodeFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    DeviceSource s;
    s.file_name = "kda_decode.cu";
    s.name_expr = fmt::format("&kiln_dev::kda::kda_decode<{}, {}>", d.k, c.v_split);
    s.source = fmt::format("// {}\n#include \"device/kda_decode.cuh\"\n", to_string(d));
    return s;
}

HostSource KdaDecodeFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "kda_decode_host.cpp";
    s.entry = "kiln_kda_decode";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/kda.hpp\"\n"
        "extern \"C\" void kiln_kda_decode(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::kda::decode<{}>(ctx, *static_cast<const kiln_params::KdaDecodeParams*>(args));\n"
        "}}\n",
        to_string(d), d.k);
    return s;
}

KernelDescriptor KdaDecodeFamily::descriptor(int head_dim, Target target, int v_split) {
    if (v_split < 0 || v_split > 4) throw InvalidArgument(fmt::format("{}: v_split {}", k_name, v_split));
    KernelDescriptor d = kda::base_descriptor(k_name, head_dim, target);
    Config c;
    c.v_split = static_cast<uint8_t>(v_split);
    d.config = KernelConfig::of(c);
    return KdaDecodeFamily().canonicalize(d);
}

void launch_kda_decode(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaDecodeParams& p) {
    if (k.desc.family.view() != KdaDecodeFamily::k_name)
        throw InvalidArgument(fmt::format("launch_kda_decode: kernel is {}", k.name));
    if (p.heads < 1 || p.idx.num_seqs < 1)
        throw InvalidArgument(fmt::format("launch_kda_decode: {} heads, {} sequences", p.heads, p.idx.num_seqs));
    const int vs = k.desc.config.as<KdaDecodeConfig>().v_split;
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(p.idx.num_seqs) * static_cast<uint32_t>(p.heads) * static_cast<uint32_t>(vs ? vs : 1), 1, 1};
    dims.block = {k_threads, 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
