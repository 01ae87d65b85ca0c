#include "jit/families/kda_prep.hpp"

#include <fmt/format.h>

#include "jit/families/kda_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(KdaPrepConfig, tile, 0, 64, "new tokens per warp: 4, 8, 16, 32 or 64 (device)"),
};
constexpr int k_threads = 128;
}  // namespace

std::span<const ConfigField> KdaPrepFamily::config_fields() const { return k_fields; }

KernelDescriptor KdaPrepFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = kda::canonical_start(k_name, in);
    const Config c = in.config.as<Config>();
    Config out;
    if (!in.target.is_host()) {
        const int tile = c.tile ? c.tile : 16;
        if (tile != 4 && tile != 8 && tile != 16 && tile != 32 && tile != 64)
            throw InvalidArgument(fmt::format("{}: tile={} must be 4, 8, 16, 32 or 64", k_name, tile));
        out.tile = static_cast<uint8_t>(tile);
    }
    d.config = KernelConfig::of(out);
    return d;
}

DeviceSource KdaPrepFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    DeviceSource s;
    s.file_name = "kda_prep.cu";
    s.name_expr = fmt::format("&kiln_dev::kda::kda_prep<{}, {}>", d.k, c.tile);
    s.source = fmt::format("// {}\n#include \"device/kda_prep.cuh\"\n", to_string(d));
    return s;
}

HostSource KdaPrepFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "kda_prep_host.cpp";
    s.entry = "kiln_kda_prep";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/kda.hpp\"\n"
        "extern \"C\" void kiln_kda_prep(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::kda::prep<{}>(ctx, *static_cast<const kiln_params::KdaPrepParams*>(args));\n"
        "}}\n",
        to_string(d), d.k);
    return s;
}

KernelDescriptor KdaPrepFamily::descriptor(int head_dim, Target target, int tile) {
    if (tile < 0 || tile > 64) throw InvalidArgument(fmt::format("{}: tile {}", k_name, tile));
    KernelDescriptor d = kda::base_descriptor(k_name, head_dim, target);
    Config c;
    c.tile = static_cast<uint8_t>(tile);
    d.config = KernelConfig::of(c);
    return KdaPrepFamily().canonicalize(d);
}

void launch_kda_prep(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaPrepParams& p) {
    if (k.desc.family.view() != KdaPrepFamily::k_name)
        throw InvalidArgument(fmt::format("launch_kda_prep: kernel is {}", k.name));
    if (p.heads < 1 || p.idx.num_seqs < 1 || p.idx.num_tokens < 1)
        throw InvalidArgument(fmt::format("launch_kda_prep: {} heads, {} sequences, {} tokens", p.heads,
                                          p.idx.num_seqs, p.idx.num_tokens));
    const int K = k.desc.k;
    if (p.raw_stride < p.heads * K || p.z_stride < p.heads * K || p.beta_stride < p.heads)
        throw InvalidArgument(fmt::format("launch_kda_prep: row strides {}, {}, {} below {} heads of {}", p.raw_stride,
                                          p.z_stride, p.beta_stride, p.heads, K));
    if (!p.softplus_gate && !(p.lower_bound < 0.0f))
        throw InvalidArgument(fmt::format("launch_kda_prep: gate lower bound {} must be negative", p.lower_bound));
    runtime::LaunchDims dims;
    const int tile = k.desc.config.as<KdaPrepConfig>().tile;
    if (tile > 0) {
        // Tiles: at most one partial tile per sequence beyond num_tokens / tile.
        const int64_t tiles = (static_cast<int64_t>(p.idx.num_tokens) + tile - 1) / tile + p.idx.num_seqs;
        const int64_t warps = tiles * p.heads;
        dims.grid = {static_cast<uint32_t>((warps * 32 + k_threads - 1) / k_threads), 1, 1};
        dims.block = {k_threads, 1, 1};
    }
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
