#include "jit/families/moe_w4a16_decode.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit {

using moe::round_up;

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_CHOICE(MoeW4A16DecodeConfig, matrix, moe::k_matrix_names, "gate_up or down"),
    KILN_CONFIG_CHOICE(MoeW4A16DecodeConfig, act, moe::k_act_names, "gate_up activation"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeConfig, block_m, 0, 32, "rows per m-block: 8, 16 or 32"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeConfig, stages, 0, 8, "ring stages per warp group (device)"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeConfig, block_k, 0, 256, "inputs per stage: 64, 128 or 256 (device)"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeConfig, dynamic, 0, 1, "dynamic item claiming (device)"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeConfig, rows, 0, 1, "down: bf16 rows for moe_w4a16_combine"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeConfig, wide_scale, 0, 1, "MXFP4 scale bytes above 128 (device)"),
    KILN_CONFIG_DERIVED(MoeW4A16DecodeConfig, mask_k, 0, 1, "K is not a multiple of 64"),
};
}  // namespace

std::span<const ConfigField> MoeW4A16DecodeFamily::config_fields() const { return k_fields; }

KernelDescriptor MoeW4A16DecodeFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = moe::canonical_start(k_name, in, true);
    const Config c = in.config.as<Config>();
    Config out;
    const bool gate_up = moe::take_matrix_and_act(k_name, c, out);
    if (!gate_up) out.rows = c.rows;
    else if (c.rows) throw InvalidArgument(fmt::format("{}: only down has a rows mode", k_name));
    const int bm = c.block_m ? c.block_m : 8;
    if (bm != 8 && bm != 16 && bm != 32)
        throw InvalidArgument(fmt::format("{}: block_m={} must be 8, 16 or 32 (1, 2 or 4 token tiles)", k_name, bm));
    out.block_m = static_cast<uint8_t>(bm);
    if (in.target.is_host()) {
        d.config = KernelConfig::of(out);
        return d;
    }
    const int tiles = bm / 8;
    const int k_pad = round_up(in.k, 64);
    int recs = moe::decode_records(k_pad, c.block_k);
    // Four records per stage where K and a two-stage ring allow (fewer stage boundaries where the consumers
    // are busiest).
    if (c.block_k == 0 && k_pad % 256 == 0 &&
        moe::decode_smem(in.weight_format, tiles, c.stages ? c.stages : 2, 4) <= moe::k_smem_limit)
        recs = 4;
    if (gate_up && in.k % 64 != 0) out.mask_k = 1;
    out.dynamic = c.dynamic;
    if (in.weight_format == WeightFormat::mxfp4_g32_e8m0) out.wide_scale = c.wide_scale;
    const int stages = c.stages ? c.stages : moe::decode_default_stages(in.weight_format, tiles, recs);
    if (stages < 2 || moe::decode_smem(in.weight_format, tiles, stages, recs) > moe::k_smem_limit)
        throw InvalidArgument(
            fmt::format("{}: {} stages of {} token tiles do not fit in shared memory", k_name, stages, tiles));
    out.block_k = static_cast<uint16_t>(64 * recs);
    out.stages = static_cast<uint8_t>(stages);
    d.config = KernelConfig::of(out);
    return d;
}

uint32_t MoeW4A16DecodeFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    return moe::decode_smem(d.weight_format, c.block_m / 8, c.stages, c.block_k / 64);
}

DeviceSource MoeW4A16DecodeFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    const bool down = c.matrix == static_cast<uint8_t>(moe::Matrix::down);
    const int mode = down ? (c.rows ? 2 : 1) : 0;
    DeviceSource s;
    s.file_name = down ? "moe_w4a16_decode_down.cu" : "moe_w4a16_decode_gate_up.cu";
    s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_decode<{}, {}, {}, {}, {}, {}, {}, {}, {}>",
                              moe::device_format(d.weight_format), c.wide_scale != 0, mode, c.act, c.mask_k != 0,
                              c.block_m / 8, c.stages, c.block_k / 64, c.dynamic);
    s.source = fmt::format("// {}\n#include \"device/moe_w4a16_decode.cuh\"\n", to_string(d));
    return s;
}

HostSource MoeW4A16DecodeFamily::host_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    const bool down = c.matrix == static_cast<uint8_t>(moe::Matrix::down);
    const int mode = down ? (c.rows ? 2 : 1) : 0;
    HostSource s;
    s.file_name = down ? "moe_w4a16_decode_down_host.cpp" : "moe_w4a16_decode_gate_up_host.cpp";
    s.entry = down ? "kiln_moe_w4a16_decode_down" : "kiln_moe_w4a16_decode_gate_up";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_w4a16.hpp\"\n"
        "extern \"C\" void {}(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::moe::gemm<{}, {}, {}, {}, {}, {}>(ctx, *static_cast<const kiln_params::moe::DecodeParams*>(args));\n"
        "}}\n",
        to_string(d), s.entry, moe::host_format(d.weight_format), mode, c.act, c.block_m, d.n, round_up(d.k, 64));
    return s;
}

KernelDescriptor MoeW4A16DecodeFamily::descriptor(moe::Matrix which, const moe::MatrixShape& w, moe::Activation act,
                                                  int block_m, Target target, bool dynamic, bool rows, int block_k,
                                                  int stages) {
    if (block_k < 0 || block_k > 256) throw InvalidArgument(fmt::format("{}: block_k {}", k_name, block_k));
    if (stages < 0 || stages > 8) throw InvalidArgument(fmt::format("{}: {} stages", k_name, stages));
    KernelDescriptor d = moe::matrix_descriptor(k_name, w, target);
    Config c;
    c.matrix = static_cast<uint8_t>(which);
    c.act = which == moe::Matrix::gate_up ? static_cast<uint8_t>(act) : 0;
    c.block_m = static_cast<uint8_t>(block_m);
    c.block_k = static_cast<uint16_t>(block_k);
    c.stages = static_cast<uint8_t>(stages);
    c.dynamic = dynamic ? 1 : 0;
    c.rows = rows ? 1 : 0;
    c.wide_scale = w.wide_scales ? 1 : 0;
    d.config = KernelConfig::of(c);
    return MoeW4A16DecodeFamily().canonicalize(d);
}

void launch_moe_w4a16_decode(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::DecodeParams& p) {
    if (k.desc.family.view() != MoeW4A16DecodeFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_decode: kernel is {}", k.name));
    if (p.n_pad != k.desc.n || p.k_pad != round_up(k.desc.k, 64) || p.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_decode: weights [{}, {}] do not match kernel {}", p.n_pad,
                                          p.k_real, k.name));
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(stream.backend().compute_units()), 1, 1};
    dims.block = {static_cast<uint32_t>(moe::k_decode_threads), 1, 1};
    dims.smem = k.dynamic_smem;
    dims.overlap_prior = true;  // the kernel starts with griddepcontrol.wait
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
