#include "jit/families/moe_w4a16_prefill.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit {

using moe::round_up;

namespace {
constexpr std::string_view k_mma_names[] = {"sync", "wgmma"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_CHOICE(MoeW4A16PrefillConfig, matrix, moe::k_matrix_names, "gate_up or down"),
    KILN_CONFIG_CHOICE(MoeW4A16PrefillConfig, act, moe::k_act_names, "gate_up activation"),
    KILN_CONFIG_FIELD(MoeW4A16PrefillConfig, block_m, 0, 192, "rows per m-block: 64, 128 or 192"),
    KILN_CONFIG_CHOICE(MoeW4A16PrefillConfig, mma, k_mma_names, "mma.sync or warpgroup MMAs (device)"),
    KILN_CONFIG_FIELD(MoeW4A16PrefillConfig, wide, 0, 1, "two super-blocks side by side per CTA (wgmma, block_m 64)"),
    KILN_CONFIG_FIELD(MoeW4A16PrefillConfig, stages, 0, 24, "weight ring stages (device)"),
    KILN_CONFIG_DERIVED(MoeW4A16PrefillConfig, block_k, 0, 128, "inputs per K step"),
    KILN_CONFIG_DERIVED(MoeW4A16PrefillConfig, block_n, 0, 2048, "layout rows per CTA"),
    KILN_CONFIG_FIELD(MoeW4A16PrefillConfig, wide_scale, 0, 1, "MXFP4 scale bytes above 128 (device)"),
    KILN_CONFIG_DERIVED(MoeW4A16PrefillConfig, mask_k, 0, 1, "gate_up K is not a multiple of 64"),
    KILN_CONFIG_DERIVED(MoeW4A16PrefillConfig, ctas_per_sm, 0, 2, "CTAs per SM"),
    KILN_CONFIG_DERIVED(MoeW4A16PrefillConfig, warps, 0, 16, "warps per CTA"),
};
}  // namespace

std::span<const ConfigField> MoeW4A16PrefillFamily::config_fields() const { return k_fields; }

KernelDescriptor MoeW4A16PrefillFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = moe::canonical_start(k_name, in, true);
    const Config c = in.config.as<Config>();
    Config out;
    const bool gate_up = moe::take_matrix_and_act(k_name, c, out);
    const int bm = c.block_m ? c.block_m : moe::k_prefill_block_m;
    if (bm != 64 && bm != 128 && bm != 192)
        throw InvalidArgument(fmt::format("{}: block_m={} must be 64, 128 or 192", k_name, bm));
    out.block_m = static_cast<uint8_t>(bm);
    if (in.target.is_host()) {
        if (bm != 64) throw InvalidArgument(fmt::format("{}: block_m {} is a device kernel (host: 64)", k_name, bm));
        d.config = KernelConfig::of(out);
        return d;
    }
    if (gate_up && in.k % 64 != 0) out.mask_k = 1;
    if (in.weight_format == WeightFormat::mxfp4_g32_e8m0) out.wide_scale = c.wide_scale;
    const bool wgmma = c.mma == static_cast<uint8_t>(MoeMma::wgmma);
    if (c.mma > 1) throw InvalidArgument(fmt::format("{}: mma must be sync or wgmma", k_name));
    if (wgmma && !moe::has_wgmma(in.target))
        throw InvalidArgument(fmt::format("{}: warpgroup MMAs need an sm_90a target, not {}", k_name, to_string(in.target)));
    if (c.wide && !wgmma) throw InvalidArgument(fmt::format("{}: the wide CTA is a warpgroup-MMA shape", k_name));
    out.mma = c.mma;
    if (bm != moe::k_prefill_block_m) {
        if (!wgmma) throw InvalidArgument(fmt::format("{}: block_m {} is the warp-specialised wgmma kernel (mma=wgmma)", k_name, bm));
        if (c.wide) throw InvalidArgument(fmt::format("{}: the wide CTA has block_m 64", k_name));
        const bool down = !gate_up;
        const int res = moe::prefill_ws_resident_records(in.weight_format, bm, in.k, down);
        const int slots = c.stages ? c.stages : moe::prefill_ws_default_slots(in.weight_format, bm, res, down);
        if (slots < 2 || slots > 24 || moe::prefill_ws_smem(in.weight_format, bm, slots, res, down) > moe::k_smem_limit)
            throw InvalidArgument(
                fmt::format("{}: {} ring slots of block_m {} do not fit in shared memory (2 to 24)", k_name, slots, bm));
        out.block_n = static_cast<uint16_t>(moe::k_superblock_rows * moe::prefill_ws_superblocks_per_cta(in.n, in.k));
        out.block_k = 64;
        out.stages = static_cast<uint8_t>(slots);
        out.ctas_per_sm = 1;
        out.warps = static_cast<uint8_t>(moe::k_prefill_ws_threads / 32);
        d.config = KernelConfig::of(out);
        return d;
    }
    // Two records per K step halve the per-step fixed work; they need K_pad % 128 == 0.
    const int recs = round_up(in.k, 64) % 128 == 0 ? 2 : 1;
    const int min_stages = wgmma ? 3 : 2;
    const int seq = wgmma ? moe::prefill_superblocks_per_cta(in.n, in.k) : 1;
    // Two super-blocks side by side: where a CTA walks one super-block and there are two.
    const int par = wgmma && c.wide && seq == 1 && in.n >= 2 * moe::k_superblock_rows ? 2 : 1;
    const uint32_t limit = par == 2 ? moe::k_smem_limit : moe::k_prefill_smem_limit;
    const int stages = c.stages ? c.stages
                       : wgmma  ? moe::prefill_wgmma_default_stages(in.weight_format, recs, par)
                                : moe::prefill_default_stages(in.weight_format, recs);
    const uint32_t smem = wgmma ? moe::prefill_wgmma_smem(in.weight_format, stages, recs, par)
                                : moe::prefill_smem(in.weight_format, stages, recs);
    if (stages < min_stages || smem > limit)
        throw InvalidArgument(fmt::format("{}: {} weight stages of block_k {} do not fit in {} bytes of shared memory "
                                          "(at least {} stages)",
                                          k_name, stages, 64 * recs, limit, min_stages));
    out.wide = par == 2 ? 1 : 0;
    out.block_n = static_cast<uint16_t>(moe::k_superblock_rows * seq * par);
    out.block_k = static_cast<uint16_t>(64 * recs);
    out.stages = static_cast<uint8_t>(stages);
    out.ctas_per_sm = static_cast<uint8_t>(par == 2 ? 1 : 2);
    out.warps = static_cast<uint8_t>(par * moe::k_prefill_threads / 32);
    d.config = KernelConfig::of(out);
    return d;
}

uint32_t MoeW4A16PrefillFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    const bool down = c.matrix == static_cast<uint8_t>(moe::Matrix::down);
    if (warp_specialised(d))
        return moe::prefill_ws_smem(d.weight_format, c.block_m, c.stages,
                                    moe::prefill_ws_resident_records(d.weight_format, c.block_m, d.k, down), down);
    if (c.mma == static_cast<uint8_t>(MoeMma::wgmma))
        return moe::prefill_wgmma_smem(d.weight_format, c.stages, c.block_k / 64, c.wide ? 2 : 1);
    return moe::prefill_smem(d.weight_format, c.stages, c.block_k / 64);
}

DeviceSource MoeW4A16PrefillFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    const bool gate_up = c.matrix == static_cast<uint8_t>(moe::Matrix::gate_up);
    const char* fmt_param = moe::device_format(d.weight_format);
    const bool wide_scale = c.wide_scale != 0, mask = c.mask_k != 0;
    DeviceSource s;
    if (warp_specialised(d)) {
        s.file_name = gate_up ? "moe_w4a16_prefill_ws_gate_up.cu" : "moe_w4a16_prefill_ws_down.cu";
        s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_prefill_wgmma_ws<{}, {}, {}, {}, {}, {}, {}, {}, {}>",
                                  fmt_param, wide_scale, gate_up ? 0 : 2, c.act, mask, c.block_m, c.stages,
                                  moe::prefill_ws_resident_records(d.weight_format, c.block_m, d.k, !gate_up),
                                  c.block_n / moe::k_superblock_rows);
        s.source = fmt::format("// {}\n#include \"device/moe_w4a16_prefill_wgmma_ws.cuh\"\n", to_string(d));
        return s;
    }
    if (c.mma == static_cast<uint8_t>(MoeMma::wgmma)) {
        const int par = c.wide ? 2 : 1;
        s.file_name = gate_up ? "moe_w4a16_prefill_wgmma_gate_up.cu" : "moe_w4a16_prefill_wgmma_down.cu";
        s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_prefill_wgmma<{}, {}, {}, {}, {}, {}, {}, {}, {}>", fmt_param,
                                  wide_scale, gate_up ? 0 : 2, c.act, mask, c.stages, c.block_k / 64,
                                  c.block_n / moe::k_superblock_rows / par, par);
        s.source = fmt::format("// {}\n#include \"device/moe_w4a16_prefill_wgmma.cuh\"\n", to_string(d));
        return s;
    }
    s.file_name = gate_up ? "moe_w4a16_prefill_gate_up.cu" : "moe_w4a16_prefill_down.cu";
    s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_prefill<{}, {}, {}, {}, {}, 8, {}, 1, {}>", fmt_param,
                              wide_scale, gate_up ? 0 : 2, c.act, mask, c.stages, c.block_k / 64);
    s.source = fmt::format("// {}\n#include \"device/moe_w4a16_prefill.cuh\"\n", to_string(d));
    return s;
}

HostSource MoeW4A16PrefillFamily::host_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    const bool down = c.matrix == static_cast<uint8_t>(moe::Matrix::down);
    HostSource s;
    s.file_name = down ? "moe_w4a16_prefill_down_host.cpp" : "moe_w4a16_prefill_gate_up_host.cpp";
    s.entry = down ? "kiln_moe_w4a16_prefill_down" : "kiln_moe_w4a16_prefill_gate_up";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_w4a16.hpp\"\n"
        "extern \"C\" void {}(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::moe::gemm<{}, {}, {}, 64, {}, {}>(ctx, *static_cast<const kiln_params::moe::DecodeParams*>(args));\n"
        "}}\n",
        to_string(d), s.entry, moe::host_format(d.weight_format), down ? 2 : 0, c.act, d.n, round_up(d.k, 64));
    return s;
}

KernelDescriptor MoeW4A16PrefillFamily::descriptor(moe::Matrix which, const moe::MatrixShape& w, moe::Activation act,
                                                   Target target, MoeMma mma, bool wide, int block_m) {
    KernelDescriptor d = moe::matrix_descriptor(k_name, w, target);
    Config c;
    c.matrix = static_cast<uint8_t>(which);
    c.act = which == moe::Matrix::gate_up ? static_cast<uint8_t>(act) : 0;
    c.block_m = static_cast<uint8_t>(block_m);
    c.mma = static_cast<uint8_t>(mma);
    c.wide = wide && mma == MoeMma::wgmma ? 1 : 0;
    c.wide_scale = w.wide_scales ? 1 : 0;
    d.config = KernelConfig::of(c);
    return MoeW4A16PrefillFamily().canonicalize(d);
}

void launch_moe_w4a16_prefill(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::DecodeParams& p,
                              int mblock_cap) {
    if (k.desc.family.view() != MoeW4A16PrefillFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: kernel is {}", k.name));
    if (p.n_pad != k.desc.n || p.k_pad != round_up(k.desc.k, 64) || p.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: weights [{}, {}] do not match kernel {}", p.n_pad,
                                          p.k_real, k.name));
    if (mblock_cap < 0) throw InvalidArgument("launch_moe_w4a16_prefill: negative m-block capacity");
    const MoeW4A16PrefillConfig c = k.desc.config.as<MoeW4A16PrefillConfig>();
    const bool host = k.desc.target.is_host();
    // The warp-specialised kernel addresses token rows with 32-bit element offsets (gate_up reads token rows,
    // down the m-blocks' sorted rows).
    const int64_t x_rows = c.matrix == static_cast<uint8_t>(moe::Matrix::gate_up)
                               ? p.num_tokens
                               : static_cast<int64_t>(mblock_cap) * c.block_m;
    if (MoeW4A16PrefillFamily::warp_specialised(k.desc) && x_rows * p.x_stride >= (int64_t(1) << 32))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: {} rows x {} inputs exceed 2^32 elements for "
                                          "block_m {} (use block_m 64)",
                                          x_rows, p.x_stride, c.block_m));
    runtime::LaunchDims dims;
    if (!host) {
        const int cols = (p.n_pad + c.block_n - 1) / c.block_n;  // CTAs per m-block
        const int64_t ctas = static_cast<int64_t>(mblock_cap) * cols;
        if (ctas > 0x7fffffff)
            throw InvalidArgument(
                fmt::format("launch_moe_w4a16_prefill: {} m-blocks x {} CTAs exceed the grid", mblock_cap, cols));
        if (ctas == 0) return;
        dims.grid = {static_cast<uint32_t>(ctas), 1, 1};
        dims.block = {static_cast<uint32_t>(32 * c.warps), 1, 1};
        dims.smem = k.dynamic_smem;
    }
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
