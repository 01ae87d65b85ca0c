#include "jit/families/moe_w4a16_decode_fused.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit {

using moe::round_up;

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_CHOICE(MoeW4A16DecodeFusedConfig, act, moe::k_act_names, "gate_up activation"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeFusedConfig, block_m, 0, 32, "rows per m-block: 8, 16 or 32"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeFusedConfig, stages, 0, 8, "ring stages per warp group"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeFusedConfig, block_k, 0, 256, "inputs per stage: 64, 128 or 256"),
    KILN_CONFIG_FIELD(MoeW4A16DecodeFusedConfig, wide_scale, 0, 1, "MXFP4 scale bytes above 128"),
    KILN_CONFIG_DERIVED(MoeW4A16DecodeFusedConfig, mask_k, 0, 1, "K is not a multiple of 64"),
};
constexpr int64_t k_warps = moe::k_decode_threads / 32;
}  // namespace

std::span<const ConfigField> MoeW4A16DecodeFusedFamily::config_fields() const { return k_fields; }

bool MoeW4A16DecodeFusedFamily::fusable(int n, int k, int block_k) {
    const int bk = block_k ? block_k : (round_up(k, 64) % 128 == 0 ? 128 : 64);
    return n > 0 && (n / 2) % bk == 0 && round_up(k, 64) % bk == 0;
}

KernelDescriptor MoeW4A16DecodeFusedFamily::canonicalize(const KernelDescriptor& in) const {
    if (in.target.is_host())
        throw InvalidArgument(fmt::format("{}: a device kernel (host target: moe_w4a16_route, moe_w4a16_decode and "
                                          "moe_w4a16_combine)",
                                          k_name));
    KernelDescriptor d = moe::canonical_start(k_name, in, true);
    const Config c = in.config.as<Config>();
    Config out;
    out.act = c.act;
    const int bm = c.block_m ? c.block_m : 8;
    if (bm != 8 && bm != 16 && bm != 32)
        throw InvalidArgument(fmt::format("{}: block_m={} must be 8, 16 or 32 (1, 2 or 4 token tiles)", k_name, bm));
    const int tiles = bm / 8;
    const int k_pad = round_up(in.k, 64);
    int recs = moe::decode_records(k_pad, c.block_k);
    if (c.block_k == 0 && k_pad % 256 == 0 && (in.n / 2) % 256 == 0 &&
        moe::decode_smem(in.weight_format, tiles, c.stages ? c.stages : 2, 4) <= moe::k_smem_limit)
        recs = 4;
    if (!fusable(in.n, in.k, 64 * recs))
        throw InvalidArgument(fmt::format("{}: no fused kernel for n={} k={}: down's K ({}) is not a multiple of "
                                          "gate_up's {}-input stages",
                                          k_name, in.n, in.k, in.n / 2, 64 * recs));
    if (in.k % 64 != 0) out.mask_k = 1;
    if (in.weight_format == WeightFormat::mxfp4_g32_e8m0) out.wide_scale = c.wide_scale;
    const int stages = c.stages ? c.stages : moe::decode_default_stages(in.weight_format, tiles, recs);
    if (stages < 2 || moe::decode_smem(in.weight_format, tiles, stages, recs) > moe::k_smem_limit)
        throw InvalidArgument(
            fmt::format("{}: {} stages of {} token tiles do not fit in shared memory", k_name, stages, tiles));
    out.block_m = static_cast<uint8_t>(bm);
    out.block_k = static_cast<uint16_t>(64 * recs);
    out.stages = static_cast<uint8_t>(stages);
    d.config = KernelConfig::of(out);
    return d;
}

// The routing is added per call (call_smem): opt in to everything.
uint32_t MoeW4A16DecodeFusedFamily::max_dynamic_smem(const KernelDescriptor&) const { return moe::k_smem_limit; }

DeviceSource MoeW4A16DecodeFusedFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    DeviceSource s;
    s.file_name = "moe_w4a16_decode_fused.cu";
    s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_decode_fused<{}, {}, {}, {}, {}, {}, {}>",
                              moe::device_format(d.weight_format), c.wide_scale != 0, c.act, c.mask_k != 0,
                              c.block_m / 8, c.stages, c.block_k / 64);
    s.source = fmt::format("// {}\n#include \"device/moe_w4a16_decode.cuh\"\n", to_string(d));
    return s;
}

KernelDescriptor MoeW4A16DecodeFusedFamily::descriptor(const moe::MatrixShape& gate_up, moe::Activation act,
                                                       int block_m, Target target, int stages, int block_k) {
    if (stages < 0 || stages > 8) throw InvalidArgument(fmt::format("{}: {} stages", k_name, stages));
    if (block_k < 0 || block_k > 256) throw InvalidArgument(fmt::format("{}: block_k {}", k_name, block_k));
    KernelDescriptor d = moe::matrix_descriptor(k_name, gate_up, target);
    Config c;
    c.act = static_cast<uint8_t>(act);
    c.block_m = static_cast<uint8_t>(block_m);
    c.stages = static_cast<uint8_t>(stages);
    c.block_k = static_cast<uint16_t>(block_k);
    c.wide_scale = gate_up.wide_scales ? 1 : 0;
    d.config = KernelConfig::of(c);
    return MoeW4A16DecodeFusedFamily().canonicalize(d);
}

bool MoeW4A16DecodeFusedFamily::k_groups_ok(const KernelDescriptor& d, int k_groups) {
    const Config c = d.config.as<Config>();
    if (d.family.view() != k_name || c.block_k == 0)
        throw InvalidArgument(fmt::format("k_groups_ok: kernel is {}", to_string(d)));
    if (k_groups != 1 && k_groups != 2 && k_groups != 4) return false;
    if (k_groups > 1 && c.block_m > 16) return false;  // the kernel shares items in m-blocks of up to 16 rows
    return round_up(d.k, 64) / c.block_k >= k_groups && (d.n / 2) / c.block_k >= k_groups;
}

uint32_t MoeW4A16DecodeFusedFamily::call_smem(const KernelDescriptor& d, int64_t slots, int experts, int mblock_cap,
                                              int topk, int k_groups) {
    const Config c = d.config.as<Config>();
    if (d.family.view() != k_name || c.block_m == 0)
        throw InvalidArgument(fmt::format("call_smem: kernel is {}", to_string(d)));
    if (slots < 0 || experts < 1 || mblock_cap < 0 || topk < 1) throw InvalidArgument("call_smem: bad sizes");
    if (!k_groups_ok(d, k_groups))
        throw InvalidArgument(fmt::format("{}: {} warp groups per item (1, 2 or 4; more than 1 needs m-blocks of up to "
                                          "16 rows and at least that many stages in gate_up's and down's K) for {}",
                                          k_name, k_groups, to_string(d)));
    if (slots > 65535 || topk > 32) return 0;
    // mirrors fused_route_area_bytes / fused_route_scratch_bytes / fused_team_area_bytes
    const auto a16 = [](int64_t b) { return (b + 15) / 16 * 16; };
    const int64_t ring = moe::decode_smem(d.weight_format, c.block_m / 8, c.stages, c.block_k / 64);
    const int64_t area = a16(int64_t(mblock_cap) * 8 + int64_t(mblock_cap) * c.block_m * 2) + 16 +
                         (k_groups > 1 ? 16 + (4 - 4 / k_groups) * 4 * (c.block_m / 8) * 1024 : 0);
    const int64_t scratch = 2 * a16(2 * slots) + a16(2 * k_warps * experts) + a16(4 * int64_t(experts)) + 4 * 33;
    if (scratch > ring || ring + area > moe::k_smem_limit) return 0;
    return static_cast<uint32_t>(ring + area);
}

void launch_moe_w4a16_decode_fused(const LoadedKernel& k, runtime::Stream& stream,
                                   const kiln_params::moe::FusedDecodeParams& p) {
    if (k.desc.family.view() != MoeW4A16DecodeFusedFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_decode_fused: kernel is {}", k.name));
    const auto& gate_up = p.gate_up;
    const auto& down = p.down;
    const int block_k = k.desc.config.as<MoeW4A16DecodeFusedConfig>().block_k;
    if (gate_up.n_pad != k.desc.n || gate_up.k_pad != round_up(k.desc.k, 64) || gate_up.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_decode_fused: gate_up weights [{}, {}] do not match kernel {}",
                                          gate_up.n_pad, gate_up.k_real, k.name));
    if (down.k_pad != gate_up.n_pad / 2 || down.n_pad < gate_up.k_real || down.k_pad % block_k != 0)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_decode_fused: down weights [{}, {}] do not chain with gate_up "
                                          "[{}, {}]",
                                          down.n_pad, down.k_pad, gate_up.n_pad, gate_up.k_real));
    if (!p.gu_done || !p.dn_done || !gate_up.work || !p.topk_ids || !p.topk_weights || !p.out || !down.out)
        throw InvalidArgument("launch_moe_w4a16_decode_fused: missing counters, routing inputs or outputs");
    if (down.n_real > p.out_stride || down.out_stride < down.n_real)
        throw InvalidArgument("launch_moe_w4a16_decode_fused: output strides narrower than the output");
    const int64_t slots = int64_t(gate_up.num_tokens) * p.topk;
    const uint32_t smem =
        MoeW4A16DecodeFusedFamily::call_smem(k.desc, slots, p.num_experts, p.mblock_cap, p.topk, p.k_groups);
    if (smem == 0)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_decode_fused: {} routed slots over {} experts ({} m-blocks) "
                                          "do not fit the kernel's shared memory",
                                          slots, p.num_experts, p.mblock_cap));
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(stream.backend().compute_units()), 1, 1};
    dims.block = {static_cast<uint32_t>(moe::k_decode_threads), 1, 1};
    dims.smem = smem;
    dims.overlap_prior = true;
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
