#include "jit/family_moe_w4a16.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"
#include "runtime/library.hpp"

namespace kiln::jit {

namespace {

constexpr int k_smem_limit = 232448;  // 227 KB of dynamic shared memory per CTA on sm_90

int round_up(int v, int m) { return (v + m - 1) / m * m; }

int tiles_of(int block_m) {
    if (block_m != 8 && block_m != 16 && block_m != 32)
        throw InvalidArgument(fmt::format("moe_w4a16: block_m={} must be 8, 16 or 32 (1, 2 or 4 token tiles)", block_m));
    return block_m / 8;
}

// Routing, and the host GEMMs: also m-blocks of 64 rows (the prefill GEMMs' block_m); device routing
// also 128 and 192 (the large m-blocks of the warp-specialised wgmma prefill GEMMs).
int routing_block_m(int block_m, bool large = false) {
    if (block_m == 0) return 8;
    if (large && (block_m == 128 || block_m == 192)) return block_m;
    if (block_m != 8 && block_m != 16 && block_m != 32 && block_m != MoeW4A16Family::k_prefill_block_m)
        throw InvalidArgument(fmt::format("moe_w4a16: block_m={} must be 8, 16, 32 or 64{} (token tiles of 8)", block_m,
                                          large ? ", 128 or 192" : ""));
    return block_m;
}

// The kind bits of a descriptor, refusing combinations that name no kernel.
uint32_t checked_kind_bits(const KernelDescriptor& in) {
    const uint32_t f = in.config.flags;
    const uint32_t lo = f & MoeW4A16Family::k_flag_kind_mask;
    if ((f & MoeW4A16Family::k_flag_kind_hi) && (lo || (f & MoeW4A16Family::k_flag_prefill)))
        throw InvalidArgument(fmt::format("moe_w4a16: unknown kernel kind (flags {:#x})", f));
    if ((f & MoeW4A16Family::k_flag_prefill) && lo > 1)
        throw InvalidArgument(fmt::format("moe_w4a16: only gate_up and down have a prefill kernel (flags {:#x})", f));
    if ((f & MoeW4A16Family::k_flag_wgmma) && !(f & MoeW4A16Family::k_flag_prefill))
        throw InvalidArgument(fmt::format("moe_w4a16: only the prefill GEMMs have a warpgroup-MMA version (flags {:#x})", f));
    if ((f & MoeW4A16Family::k_flag_wide) && !(f & MoeW4A16Family::k_flag_wgmma))
        throw InvalidArgument(fmt::format("moe_w4a16: the wide CTA is a warpgroup-MMA prefill shape (flags {:#x})", f));
    return f & (MoeW4A16Family::k_flag_kind_mask | MoeW4A16Family::k_flag_kind_hi | MoeW4A16Family::k_flag_prefill);
}

int record_bytes(WeightFormat f) { return 8 * (512 + (f == WeightFormat::int4_g32_bf16 ? 64 : 32)); }

const char* format_param(WeightFormat f) {
    return f == WeightFormat::int4_g32_bf16 ? "kiln_dev::moe::kFormatInt4" : "kiln_dev::moe::kFormatMxfp4";
}

WeightFormat to_descriptor_format(moe::W4Format f) {
    return f == moe::W4Format::int4_g32_bf16 ? WeightFormat::int4_g32_bf16 : WeightFormat::mxfp4_g32_e8m0;
}

// The weight format and matrix shape of a GEMM or dequant descriptor (both targets), checked.
void take_weight_shape(const KernelDescriptor& in, KernelDescriptor& d) {
    if (in.weight_format != WeightFormat::int4_g32_bf16 && in.weight_format != WeightFormat::mxfp4_g32_e8m0)
        throw InvalidArgument("moe_w4a16: weight format must be int4_g32_bf16 or mxfp4_g32_e8m0");
    if (in.n <= 0 || in.n % MoeW4A16Family::k_superblock_rows != 0)
        throw InvalidArgument(fmt::format("moe_w4a16: n={} must be the layout's padded row count (a positive "
                                          "multiple of {}; see PreparedMoeWeights::n_pad)",
                                          in.n, MoeW4A16Family::k_superblock_rows));
    if (in.k <= 0 || in.k % 32 != 0)
        throw InvalidArgument(fmt::format("moe_w4a16: k={} must be a positive multiple of the group size 32", in.k));
    d.weight_format = in.weight_format;
    d.n = in.n;
    d.k = in.k;
    d.act_dtype = runtime::DType::bf16;
}

// Host target: the fields the host kernels bake in (see the header); the rest stay zero.
KernelDescriptor canonicalize_host(const KernelDescriptor& in) {
    KernelDescriptor d;
    d.family = ShortName(MoeW4A16Family::k_name);
    d.mode = ShortName("indexed");
    d.target = in.target;
    if (in.config.flags & MoeW4A16Family::k_flag_fused)
        throw InvalidArgument("moe_w4a16: the fused decode kernel is a device kernel (host target: gate_up, then down)");
    // The prefill kinds (either MMA version) are the host gate_up / down rows kernel with block_m 64.
    const uint32_t kind_bits = checked_kind_bits(in) & ~MoeW4A16Family::k_flag_prefill;
    const auto which = MoeW4A16Family::kind(in);
    const bool prefill = MoeW4A16Family::is_prefill(which);
    d.config.flags = kind_bits;
    if (which == MoeW4A16Kernel::combine) {
        if (in.weight_format != WeightFormat::none)
            throw InvalidArgument("moe_w4a16: the combine kernel takes no weights (weight format must be none)");
        d.act_dtype = runtime::DType::bf16;
        return d;
    }
    if (which == MoeW4A16Kernel::routing) {
        if (in.experts < 1 || in.experts > MoeW4A16Family::k_max_experts)
            throw InvalidArgument(fmt::format("moe_w4a16: routing needs experts in [1, {}], got {}",
                                              MoeW4A16Family::k_max_experts, in.experts));
        if (in.weight_format != WeightFormat::none)
            throw InvalidArgument("moe_w4a16: the routing kernel takes no weights (weight format must be none)");
        d.experts = in.experts;
        d.act_dtype = runtime::DType::i32;
        d.config.block_m = static_cast<uint16_t>(routing_block_m(in.config.block_m));
        return d;
    }
    take_weight_shape(in, d);
    if (which == MoeW4A16Kernel::dequant) return d;
    // The prefill kinds are the host gate_up / down rows kernel with block_m 64.
    if (prefill && in.config.block_m != 0 && in.config.block_m != MoeW4A16Family::k_prefill_block_m)
        throw InvalidArgument(fmt::format("moe_w4a16: the prefill GEMMs have block_m 64, not {}", in.config.block_m));
    if (which == MoeW4A16Kernel::gate_up || which == MoeW4A16Kernel::prefill_gate_up)
        d.config.flags |= in.config.flags & MoeW4A16Family::k_flag_situ;
    if (which == MoeW4A16Kernel::down) d.config.flags |= in.config.flags & MoeW4A16Family::k_flag_rows;
    if (which == MoeW4A16Kernel::prefill_down) d.config.flags |= MoeW4A16Family::k_flag_rows;
    d.config.block_m = static_cast<uint16_t>(prefill ? MoeW4A16Family::k_prefill_block_m : routing_block_m(in.config.block_m));
    d.config.block_n = MoeW4A16Family::k_superblock_rows;
    return d;
}

// The family's descriptor skeleton for `target`, and with the shape and format of prepared weights.
KernelDescriptor base_descriptor(Target target) {
    KernelDescriptor d;
    d.family = ShortName(MoeW4A16Family::k_name);
    d.mode = ShortName("indexed");
    d.target = target;
    return d;
}
KernelDescriptor weights_descriptor(const moe::PreparedMoeWeights& w, Target target) {
    KernelDescriptor d = base_descriptor(target);
    d.weight_format = to_descriptor_format(w.format);
    d.n = w.n_pad;
    d.k = w.k;
    return d;
}

const char* host_format_param(WeightFormat f) {
    return f == WeightFormat::int4_g32_bf16 ? "kiln_host::moe::kFormatInt4" : "kiln_host::moe::kFormatMxfp4";
}

}  // namespace

// One stage: kRecs records, the token tile, a 32-byte header; per group two mbarriers per stage.
int moe_w4a16_stage_bytes(WeightFormat f, int tiles, int recs) {
    const int x_stride = 128 * recs + 16;
    const int meta = recs * record_bytes(f) + 8 * tiles * x_stride;
    return round_up(meta + 32, 128);
}

uint32_t moe_w4a16_gemm_smem(WeightFormat f, int tiles, int stages, int recs) {
    const int group = stages * moe_w4a16_stage_bytes(f, tiles, recs) + round_up(16 * stages, 128);
    return static_cast<uint32_t>(4 * group);
}

namespace {

// 64-wide records per decode pipeline stage: from block_k (64, 128 or 256, dividing K_pad), or by
// default 2 where K_pad % 128 == 0, else 1.
int decode_records(int k_pad, int block_k) {
    if (block_k == 0) return k_pad % 128 == 0 ? 2 : 1;
    if ((block_k != 64 && block_k != 128 && block_k != 256) || k_pad % block_k != 0)
        throw InvalidArgument(fmt::format("moe_w4a16: decode block_k {} (64, 128 or 256, dividing K padded to 64: {})",
                                          block_k, k_pad));
    return block_k / 64;
}

// The deepest ring, from `most` slots down to `least`, whose shared memory `smem(slots)` fits in `limit`.
template <typename Smem>
int deepest_ring(int most, int least, uint32_t limit, Smem smem) {
    int s = most;
    while (s > least && smem(s) > limit) --s;
    return s;
}

// Super-blocks one CTA walks in sequence: the largest power of two up to 8 that keeps it at `max_units`
// or fewer (`units` per super-block: K steps or records), at least 1 and at most n / 128.
int superblocks_in_sequence(int n, int units, int max_units) {
    int c = 1;
    while (c < 8 && 2 * c * units <= max_units) c *= 2;
    return std::max(1, std::min(c, n / MoeW4A16Family::k_superblock_rows));
}

}  // namespace

// templates/device/moe_w4a16_prefill.cuh, PrefillSmem<kFormat, 8, recs>: 4 (one record per step) or 3 (two)
// token stages of 64 rows x (128 recs + 16) bytes, then the weight slots of `recs` records, then one
// mbarrier per stage of both rings.
uint32_t moe_w4a16_prefill_smem(WeightFormat f, int stages, int recs) {
    const int x_stages = recs == 1 ? 4 : 3, x_tile = 64 * (128 * recs + 16);
    return static_cast<uint32_t>(x_stages * x_tile + stages * recs * record_bytes(f) +
                                 round_up(8 * (stages + x_stages), 128));
}

int moe_w4a16_prefill_default_stages(WeightFormat f, int recs) {
    return deepest_ring(24, 2, k_moe_w4a16_prefill_smem_limit,
                        [&](int s) { return moe_w4a16_prefill_smem(f, s, recs); });
}

// templates/device/moe_w4a16_prefill_wgmma.cuh, PrefillWgmmaSmem<kFormat, recs, par>: 4 token stages of 64
// rows x 128 recs bytes (128-byte swizzle, no padding), the weight slots (par super-blocks x recs records),
// one mbarrier per stage of both rings.
uint32_t moe_w4a16_prefill_wgmma_smem(WeightFormat f, int stages, int recs, int par) {
    const int x_stages = 4, x_tile = 64 * 128 * recs;
    return static_cast<uint32_t>(x_stages * x_tile + stages * par * recs * record_bytes(f) +
                                 round_up(8 * (stages + x_stages), 128));
}

int moe_w4a16_prefill_wgmma_default_stages(WeightFormat f, int recs, int par) {
    const uint32_t limit = par == 2 ? static_cast<uint32_t>(k_smem_limit) : k_moe_w4a16_prefill_smem_limit;
    return deepest_ring(24, 3, limit, [&](int s) { return moe_w4a16_prefill_wgmma_smem(f, s, recs, par); });
}

uint32_t moe_w4a16_prefill_ws_smem(WeightFormat f, int block_m, int slots, int resident, bool down) {
    const int x_rec = block_m * 128;
    // down: two 64-column tiles of bf16 rows; gate_up: the m-block's router weights
    const int staging = down ? block_m * 256 : block_m * 4;
    return static_cast<uint32_t>((resident > 0 ? resident : slots) * x_rec + slots * record_bytes(f) + staging +
                                 round_up(8 * (2 * slots + std::max(1, resident)), 128));
}

int prefill_ws_resident_records(WeightFormat f, int block_m, int k, bool down) {
    const int recs = round_up(k, 64) / 64;
    return moe_w4a16_prefill_ws_smem(f, block_m, 8, recs, down) <= static_cast<uint32_t>(k_smem_limit) ? recs : 0;
}

int moe_w4a16_prefill_ws_default_slots(WeightFormat f, int block_m, int resident, bool down) {
    return deepest_ring(24, 2, static_cast<uint32_t>(k_smem_limit),
                        [&](int s) { return moe_w4a16_prefill_ws_smem(f, block_m, s, resident, down); });
}

int prefill_ws_superblocks_per_cta(int n, int k) {
    const int recs = round_up(k, 64) / 64;
    if (recs > 8) return superblocks_in_sequence(n, recs, 32);
    // Short K: a CTA's prologue (its resident token tile, the first records in flight) is paid per CTA, so
    // up to 16 super-blocks, spread evenly over the fewest CTAs per m-block.
    const int nsb = std::max(1, n / MoeW4A16Family::k_superblock_rows), cols = (nsb + 15) / 16;
    return (nsb + cols - 1) / cols;
}

int prefill_superblocks_per_cta(int n, int k) {
    const int recs = round_up(k, 64) % 128 == 0 ? 2 : 1;
    return superblocks_in_sequence(n, round_up(k, 64) / (64 * recs), 16);
}

int moe_w4a16_default_stages(WeightFormat f, int tiles, int recs) {
    return deepest_ring(8, 2, static_cast<uint32_t>(k_smem_limit),
                        [&](int s) { return moe_w4a16_gemm_smem(f, tiles, s, recs); });
}

KernelDescriptor MoeW4A16Family::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d;
    d.family = ShortName(k_name);
    if (in.mode.empty() || in.mode.view() == "indexed") d.mode = ShortName("indexed");
    else throw InvalidArgument(fmt::format("moe_w4a16: unknown mode '{}' (modes: indexed)", in.mode.view()));
    if (in.target.is_host()) return canonicalize_host(in);
    if (in.target.arch < 90 || (in.target.arch == 90 && in.target.suffix != 'a'))
        throw InvalidArgument(fmt::format("moe_w4a16: target {} is not supported (needs sm_90a: bulk async copies, "
                                          "mbarriers, bf16x2 arithmetic)",
                                          to_string(in.target)));
    if (in.target.arch != 90)
        throw InvalidArgument(fmt::format("moe_w4a16: target {} has no tuned configuration yet (sm_90a only)",
                                          to_string(in.target)));
    d.target = in.target;
    const uint32_t kind_bits = checked_kind_bits(in);
    const auto which = kind(in);
    d.config.flags = kind_bits;

    if (which == MoeW4A16Kernel::combine) {
        if (in.weight_format != WeightFormat::none)
            throw InvalidArgument("moe_w4a16: the combine kernel takes no weights (weight format must be none)");
        d.act_dtype = runtime::DType::bf16;
        d.config.warps = 4;
        return d;
    }

    if (which == MoeW4A16Kernel::routing) {
        if (in.experts < 1 || in.experts > k_max_experts)
            throw InvalidArgument(fmt::format("moe_w4a16: routing needs experts in [1, {}], got {}", k_max_experts, in.experts));
        if (in.weight_format != WeightFormat::none)
            throw InvalidArgument("moe_w4a16: the routing kernel takes no weights (weight format must be none)");
        d.experts = in.experts;
        d.act_dtype = runtime::DType::i32;
        d.config.block_m = static_cast<uint16_t>(routing_block_m(in.config.block_m, true));
        d.config.warps = 32;
        return d;
    }

    take_weight_shape(in, d);
    if (in.weight_format == WeightFormat::mxfp4_g32_e8m0) d.config.flags |= in.config.flags & k_flag_wide_scale;
    if (which == MoeW4A16Kernel::dequant) return d;

    if (is_prefill(which)) {
        const int bm = in.config.block_m ? in.config.block_m : k_prefill_block_m;
        if (bm != k_prefill_block_m && bm != 128 && bm != 192)
            throw InvalidArgument(fmt::format("moe_w4a16: the prefill GEMMs have block_m 64, 128 or 192, not {}", bm));
        if (which == MoeW4A16Kernel::prefill_gate_up) {
            d.config.flags |= in.config.flags & k_flag_situ;
            if (in.k % 64 != 0) d.config.flags |= k_flag_mask_k;
        } else {
            d.config.flags |= k_flag_rows;  // the prefill down GEMM writes rows only
        }
        if (bm != k_prefill_block_m) {
            if (!(in.config.flags & k_flag_wgmma) || !has_wgmma(in.target))
                throw InvalidArgument(fmt::format("moe_w4a16: prefill block_m {} is the warpgroup-MMA kernel's (sm_90a, "
                                                  "flag bit 10), target {}",
                                                  bm, to_string(in.target)));
            if (in.config.flags & k_flag_wide)
                throw InvalidArgument("moe_w4a16: the wide CTA has block_m 64");
        }
        if (bm != k_prefill_block_m) {
            // The warp-specialised wgmma kernel (moe_w4a16_prefill_wgmma_ws.cuh): one record per ring slot.
            const bool down = which == MoeW4A16Kernel::prefill_down;
            const int res = prefill_ws_resident_records(in.weight_format, bm, in.k, down);
            const int slots =
                in.config.stages ? in.config.stages : moe_w4a16_prefill_ws_default_slots(in.weight_format, bm, res, down);
            if (slots < 2 || slots > 24 ||
                moe_w4a16_prefill_ws_smem(in.weight_format, bm, slots, res, down) > static_cast<uint32_t>(k_smem_limit))
                throw InvalidArgument(fmt::format("moe_w4a16: {} ring slots of block_m {} do not fit in shared memory "
                                                  "(2 to 24)",
                                                  slots, bm));
            d.config.flags |= k_flag_wgmma;
            d.config.block_m = static_cast<uint16_t>(bm);
            d.config.block_n = static_cast<uint16_t>(k_superblock_rows * prefill_ws_superblocks_per_cta(in.n, in.k));
            d.config.block_k = 64;
            d.config.stages = static_cast<uint8_t>(slots);
            d.config.ctas_per_sm = 1;
            d.config.warps = static_cast<uint8_t>(k_prefill_ws_threads / 32);
            return d;
        }
        // Two records per K step (block_k 128) halve the per-step fixed work; they need K_pad % 128 == 0.
        const int recs = round_up(in.k, 64) % 128 == 0 ? 2 : 1;
        const bool wgmma = (in.config.flags & k_flag_wgmma) != 0;
        if (wgmma && !has_wgmma(in.target))
            throw InvalidArgument(fmt::format("moe_w4a16: the warpgroup-MMA prefill GEMMs need an sm_90a target, not {}",
                                              to_string(in.target)));
        const int min_stages = wgmma ? 3 : 2;
        const int seq = wgmma ? prefill_superblocks_per_cta(in.n, in.k) : 1;
        // Two super-blocks side by side (wgmma only): where a CTA walks one super-block and there are two.
        const int par = wgmma && (in.config.flags & k_flag_wide) && seq == 1 && in.n >= 2 * k_superblock_rows ? 2 : 1;
        const uint32_t limit = par == 2 ? static_cast<uint32_t>(k_smem_limit) : k_moe_w4a16_prefill_smem_limit;
        const int stages = in.config.stages ? in.config.stages
                           : wgmma          ? moe_w4a16_prefill_wgmma_default_stages(in.weight_format, recs, par)
                                            : moe_w4a16_prefill_default_stages(in.weight_format, recs);
        const uint32_t smem = wgmma ? moe_w4a16_prefill_wgmma_smem(in.weight_format, stages, recs, par)
                                    : moe_w4a16_prefill_smem(in.weight_format, stages, recs);
        if (stages < min_stages || smem > limit)
            throw InvalidArgument(fmt::format("moe_w4a16: {} prefill weight stages of block_k {} do not fit in {} bytes "
                                              "of shared memory (at least {} stages)",
                                              stages, 64 * recs, limit, min_stages));
        if (wgmma) d.config.flags |= k_flag_wgmma;
        if (par == 2) d.config.flags |= k_flag_wide;
        d.config.block_m = static_cast<uint16_t>(bm);
        d.config.block_n = static_cast<uint16_t>(k_superblock_rows * seq * par);
        d.config.block_k = static_cast<uint16_t>(64 * recs);
        d.config.stages = static_cast<uint8_t>(stages);
        d.config.ctas_per_sm = static_cast<uint8_t>(par == 2 ? 1 : 2);
        d.config.warps = static_cast<uint8_t>(par * k_prefill_threads / 32);
        return d;
    }

    const int tiles = tiles_of(in.config.block_m ? in.config.block_m : 8);
    const int k_pad = round_up(in.k, 64);
    int recs = decode_records(k_pad, in.config.block_k);
    // Four records per stage where K (the fused kernel: down's K too) and a two-stage ring allow
    // (measured on H200, perf notes §16: -3 to -6% where the consumers are busiest, neutral elsewhere).
    const bool fused = (in.config.flags & k_flag_fused) != 0;
    if (in.config.block_k == 0 && k_pad % 256 == 0 && (!fused || (in.n / 2) % 256 == 0) &&
        moe_w4a16_gemm_smem(in.weight_format, tiles, in.config.stages ? in.config.stages : 2, 4) <=
            static_cast<uint32_t>(k_smem_limit))
        recs = 4;
    if (which == MoeW4A16Kernel::gate_up) {
        d.config.flags |= in.config.flags & k_flag_situ;
        if (in.k % 64 != 0) d.config.flags |= k_flag_mask_k;
    }
    if (which == MoeW4A16Kernel::down) d.config.flags |= in.config.flags & k_flag_rows;
    const bool dynamic = (in.config.flags & k_flag_dynamic) != 0;
    if (dynamic) d.config.flags |= k_flag_dynamic;
    if (in.config.flags & k_flag_fused) {
        if (which != MoeW4A16Kernel::gate_up || !dynamic)
            throw InvalidArgument("moe_w4a16: the fused decode kernel is a dynamic-schedule gate_up descriptor");
        if (!fusable(in.n, in.k, 64 * recs))
            throw InvalidArgument(fmt::format("moe_w4a16: no fused decode kernel for n={} k={}: down's K ({}) is not a "
                                              "multiple of gate_up's {}-input stages",
                                              in.n, in.k, in.n / 2, 64 * recs));
        d.config.flags |= k_flag_fused;
    }
    int stages = in.config.stages ? in.config.stages : moe_w4a16_default_stages(in.weight_format, tiles, recs);
    if (stages < 2 || moe_w4a16_gemm_smem(in.weight_format, tiles, stages, recs) > static_cast<uint32_t>(k_smem_limit))
        throw InvalidArgument(fmt::format("moe_w4a16: {} stages of {} token tiles do not fit in shared memory", stages, tiles));
    d.config.block_m = static_cast<uint16_t>(8 * tiles);
    d.config.block_n = k_superblock_rows;
    d.config.block_k = static_cast<uint16_t>(64 * recs);
    d.config.stages = static_cast<uint8_t>(stages);
    d.config.ctas_per_sm = 1;
    d.config.warps = MoeW4A16Family::k_threads / 32;
    return d;
}

uint32_t MoeW4A16Family::max_dynamic_smem(const KernelDescriptor& d) const {
    switch (kind(d)) {
        case MoeW4A16Kernel::routing: return static_cast<uint32_t>(3 * 4 * d.experts);
        case MoeW4A16Kernel::dequant:
        case MoeW4A16Kernel::combine: return 0;
        case MoeW4A16Kernel::prefill_gate_up:
        case MoeW4A16Kernel::prefill_down:
            if (prefill_ws(d)) {
                const bool down = kind(d) == MoeW4A16Kernel::prefill_down;
                return moe_w4a16_prefill_ws_smem(d.weight_format, d.config.block_m, d.config.stages,
                                                 prefill_ws_resident_records(d.weight_format, d.config.block_m, d.k, down),
                                                 down);
            }
            if (d.config.flags & k_flag_wgmma)
                return moe_w4a16_prefill_wgmma_smem(d.weight_format, d.config.stages, d.config.block_k / 64,
                                                    (d.config.flags & k_flag_wide) ? 2 : 1);
            return moe_w4a16_prefill_smem(d.weight_format, d.config.stages, d.config.block_k / 64);
        default:
            // the fused kernel adds its routing per call (fused_call_smem): opt in to everything
            if (d.config.flags & k_flag_fused) return static_cast<uint32_t>(k_smem_limit);
            return moe_w4a16_gemm_smem(d.weight_format, d.config.block_m / 8, d.config.stages, d.config.block_k / 64);
    }
}

DeviceSource MoeW4A16Family::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    const bool wide = (d.config.flags & k_flag_wide_scale) != 0;
    switch (kind(d)) {
        case MoeW4A16Kernel::routing:
            s.file_name = "moe_w4a16_routing.cu";
            s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_routing<{}>", d.config.block_m);
            s.source = fmt::format("// {}\n#include \"device/moe_w4a16_routing.cuh\"\n", to_string(d));
            return s;
        case MoeW4A16Kernel::dequant:
            s.file_name = "moe_w4a16_dequant.cu";
            s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_dequant<{}, {}, 8>", format_param(d.weight_format), wide);
            s.source = fmt::format("// {}\n#include \"device/moe_w4a16_dequant.cuh\"\n", to_string(d));
            return s;
        case MoeW4A16Kernel::combine:
            s.file_name = "moe_w4a16_combine.cu";
            s.name_expr = "&kiln_dev::moe::moe_w4a16_combine";
            s.source = fmt::format("// {}\n#include \"device/moe_w4a16_combine.cuh\"\n", to_string(d));
            return s;
        case MoeW4A16Kernel::prefill_gate_up:
        case MoeW4A16Kernel::prefill_down: {
            // kTiles 8 (block_m 64), kRB 1: each warp owns one 16-row block and every token tile;
            // kRecs = block_k / 64 records per K step.
            const bool gate_up = kind(d) == MoeW4A16Kernel::prefill_gate_up;
            const bool situ = (d.config.flags & k_flag_situ) != 0;
            const bool mask = (d.config.flags & k_flag_mask_k) != 0;
            if (prefill_ws(d)) {
                s.file_name = gate_up ? "moe_w4a16_prefill_wgmma_ws_gate_up.cu" : "moe_w4a16_prefill_wgmma_ws_down.cu";
                s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_prefill_wgmma_ws<{}, {}, {}, {}, {}, {}, {}, {}, {}>",
                                          format_param(d.weight_format), wide, gate_up ? 0 : 2, situ ? 1 : 0, mask,
                                          d.config.block_m, d.config.stages,
                                          prefill_ws_resident_records(d.weight_format, d.config.block_m, d.k, !gate_up),
                                          d.config.block_n / k_superblock_rows);
                s.source = fmt::format("// {}\n#include \"device/moe_w4a16_prefill_wgmma_ws.cuh\"\n", to_string(d));
                return s;
            }
            if (d.config.flags & k_flag_wgmma) {
                s.file_name = gate_up ? "moe_w4a16_prefill_wgmma_gate_up.cu" : "moe_w4a16_prefill_wgmma_down.cu";
                const int par = (d.config.flags & k_flag_wide) ? 2 : 1;
                s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_prefill_wgmma<{}, {}, {}, {}, {}, {}, {}, {}, {}>",
                                          format_param(d.weight_format), wide, gate_up ? 0 : 2, situ ? 1 : 0, mask,
                                          d.config.stages, d.config.block_k / 64, d.config.block_n / k_superblock_rows / par,
                                          par);
                s.source = fmt::format("// {}\n#include \"device/moe_w4a16_prefill_wgmma.cuh\"\n", to_string(d));
                return s;
            }
            s.file_name = gate_up ? "moe_w4a16_prefill_gate_up.cu" : "moe_w4a16_prefill_down.cu";
            s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_prefill<{}, {}, {}, {}, {}, 8, {}, 1, {}>",
                                      format_param(d.weight_format), wide, gate_up ? 0 : 2, situ ? 1 : 0, mask,
                                      d.config.stages, d.config.block_k / 64);
            s.source = fmt::format("// {}\n#include \"device/moe_w4a16_prefill.cuh\"\n", to_string(d));
            return s;
        }
        default: {
            const bool down = kind(d) == MoeW4A16Kernel::down;
            const bool situ = (d.config.flags & k_flag_situ) != 0;
            const bool mask = (d.config.flags & k_flag_mask_k) != 0;
            const int mode = down ? ((d.config.flags & k_flag_rows) ? 2 : 1) : 0;
            const int sched = (d.config.flags & k_flag_dynamic) ? 1 : 0;
            if (d.config.flags & k_flag_fused) {
                s.file_name = "moe_w4a16_fused.cu";
                s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_decode_fused<{}, {}, {}, {}, {}, {}, {}>",
                                          format_param(d.weight_format), wide, situ ? 1 : 0, mask, d.config.block_m / 8,
                                          d.config.stages, d.config.block_k / 64);
                s.source = fmt::format("// {}\n#include \"device/moe_w4a16_decode.cuh\"\n", to_string(d));
                return s;
            }
            s.file_name = down ? "moe_w4a16_down.cu" : "moe_w4a16_gate_up.cu";
            s.name_expr = fmt::format("&kiln_dev::moe::moe_w4a16_decode<{}, {}, {}, {}, {}, {}, {}, {}, {}>",
                                      format_param(d.weight_format), wide, mode, situ ? 1 : 0, mask,
                                      d.config.block_m / 8, d.config.stages, d.config.block_k / 64, sched);
            s.source = fmt::format("// {}\n#include \"device/moe_w4a16_decode.cuh\"\n", to_string(d));
            return s;
        }
    }
}

HostSource MoeW4A16Family::host_source(const KernelDescriptor& d) const {
    HostSource s;
    std::string call;
    switch (kind(d)) {
        case MoeW4A16Kernel::routing:
            s.file_name = "moe_w4a16_routing_host.cpp";
            s.entry = "kiln_moe_w4a16_routing";
            call = fmt::format("kiln_host::moe::routing<{}, {}>(ctx, *static_cast<const kiln_host::moe::RoutingParams*>(args))",
                               d.experts, d.config.block_m);
            break;
        case MoeW4A16Kernel::dequant:
            s.file_name = "moe_w4a16_dequant_host.cpp";
            s.entry = "kiln_moe_w4a16_dequant";
            call = fmt::format(
                "kiln_host::moe::dequant<{}, {}, {}>(ctx, *static_cast<const kiln_host::moe::DequantParams*>(args))",
                host_format_param(d.weight_format), d.n, round_up(d.k, 64));
            break;
        case MoeW4A16Kernel::combine:
            s.file_name = "moe_w4a16_combine_host.cpp";
            s.entry = "kiln_moe_w4a16_combine";
            call = "kiln_host::moe::combine(ctx, *static_cast<const kiln_host::moe::CombineParams*>(args))";
            break;
        default: {
            const bool down = kind(d) == MoeW4A16Kernel::down;
            const bool situ = (d.config.flags & k_flag_situ) != 0;
            const int mode = down ? ((d.config.flags & k_flag_rows) ? 2 : 1) : 0;
            s.file_name = down ? "moe_w4a16_down_host.cpp" : "moe_w4a16_gate_up_host.cpp";
            s.entry = down ? "kiln_moe_w4a16_down" : "kiln_moe_w4a16_gate_up";
            call = fmt::format(
                "kiln_host::moe::gemm<{}, {}, {}, {}, {}, {}>(ctx, *static_cast<const kiln_host::moe::DecodeParams*>(args))",
                host_format_param(d.weight_format), mode, situ ? 1 : 0, d.config.block_m, d.n, round_up(d.k, 64));
            break;
        }
    }
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_w4a16.hpp\"\n"
        "extern \"C\" void {}(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    {};\n"
        "}}\n",
        to_string(d), s.entry, call);
    return s;
}

KernelDescriptor MoeW4A16Family::gemm(MoeW4A16Kernel which, const moe::PreparedMoeWeights& w, MoeActivation act,
                                      int tiles, Target target, MoeW4A16Schedule schedule, bool rows, int block_k) {
    if (which != MoeW4A16Kernel::gate_up && which != MoeW4A16Kernel::down)
        throw InvalidArgument("moe_w4a16: gemm() builds gate_up or down descriptors");
    moe::require_layout(w, moe::W4Layout::decode_mma16, w.format,
                        which == MoeW4A16Kernel::gate_up ? "decode gate_up" : "decode down");
    if ((which == MoeW4A16Kernel::gate_up) != w.gate_up)
        throw InvalidArgument(fmt::format("moe_w4a16: the {} kernel needs {} weights",
                                          which == MoeW4A16Kernel::gate_up ? "gate_up" : "down",
                                          which == MoeW4A16Kernel::gate_up ? "interleaved gate/up" : "plain down"));
    KernelDescriptor d = weights_descriptor(w, target);
    d.config.block_m = static_cast<uint16_t>(8 * tiles);
    d.config.flags = static_cast<uint32_t>(which);
    if (act == MoeActivation::situ_glu && which == MoeW4A16Kernel::gate_up) d.config.flags |= k_flag_situ;
    if (w.wide_scales) d.config.flags |= k_flag_wide_scale;
    if (schedule == MoeW4A16Schedule::dynamic) d.config.flags |= k_flag_dynamic;
    if (rows) {
        if (which != MoeW4A16Kernel::down) throw InvalidArgument("moe_w4a16: only the down kernel has a rows mode");
        d.config.flags |= k_flag_rows;
    }
    if (block_k < 0 || block_k > 256) throw InvalidArgument(fmt::format("moe_w4a16: decode block_k {}", block_k));
    d.config.block_k = static_cast<uint16_t>(block_k);
    return MoeW4A16Family().canonicalize(d);
}

bool MoeW4A16Family::fusable(int n, int k, int block_k) {
    const int bk = block_k ? block_k : (round_up(k, 64) % 128 == 0 ? 128 : 64);
    return n > 0 && (n / 2) % bk == 0 && round_up(k, 64) % bk == 0;
}

KernelDescriptor MoeW4A16Family::fused(const moe::PreparedMoeWeights& gate_up, MoeActivation act, int tiles,
                                       Target target, int stages, int block_k) {
    KernelDescriptor d = gemm(MoeW4A16Kernel::gate_up, gate_up, act, tiles, target, MoeW4A16Schedule::dynamic);
    d.config.flags |= k_flag_fused;
    if (stages < 0 || stages > 255) throw InvalidArgument(fmt::format("moe_w4a16: {} decode stages", stages));
    d.config.stages = static_cast<uint8_t>(stages);
    d.config.block_k = static_cast<uint16_t>(block_k);
    return MoeW4A16Family().canonicalize(d);
}

bool MoeW4A16Family::fused_k_groups_ok(const KernelDescriptor& d, int k_groups) {
    if (!(d.config.flags & k_flag_fused) || d.config.block_k == 0)
        throw InvalidArgument(fmt::format("fused_k_groups_ok: kernel is {}", to_string(d)));
    if (k_groups != 1 && k_groups != 2 && k_groups != 4) return false;
    if (k_groups > 1 && d.config.block_m > 16) return false;  // the kernel shares items in m-blocks of up to 16 rows
    const int stage_k = d.config.block_k;
    return round_up(d.k, 64) / stage_k >= k_groups && (static_cast<int>(d.n) / 2) / stage_k >= k_groups;
}

uint32_t MoeW4A16Family::fused_call_smem(const KernelDescriptor& d, int64_t slots, int experts, int mblock_cap,
                                         int topk, int k_groups) {
    if (!(d.config.flags & k_flag_fused) || d.config.block_m == 0)
        throw InvalidArgument(fmt::format("fused_call_smem: kernel is {}", to_string(d)));
    if (slots < 0 || experts < 1 || mblock_cap < 0 || topk < 1) throw InvalidArgument("fused_call_smem: bad sizes");
    if (!fused_k_groups_ok(d, k_groups))
        throw InvalidArgument(fmt::format("moe_w4a16 fused kernel: {} warp groups per item (1, 2 or 4; more than 1 needs "
                                          "m-blocks of up to 16 rows and at least that many stages in gate_up's and down's "
                                          "K) for kernel {}",
                                          k_groups, to_string(d)));
    if (slots > 65535 || topk > 32) return 0;
    // mirrors fused_route_area_bytes / fused_route_scratch_bytes / fused_team_area_bytes
    // (templates/device/moe_w4a16_decode.cuh)
    constexpr int64_t warps = k_threads / 32;
    const auto a16 = [](int64_t b) { return (b + 15) / 16 * 16; };
    const int64_t ring = moe_w4a16_gemm_smem(d.weight_format, d.config.block_m / 8, d.config.stages, d.config.block_k / 64);
    const int64_t area = a16(int64_t(mblock_cap) * 8 + int64_t(mblock_cap) * d.config.block_m * 2) + 16 +
                         (k_groups > 1 ? 16 + (4 - 4 / k_groups) * 4 * (d.config.block_m / 8) * 1024 : 0);
    const int64_t scratch = 2 * a16(2 * slots) + a16(2 * warps * experts) + a16(4 * int64_t(experts)) + 4 * 33;
    if (scratch > ring || ring + area > k_smem_limit) return 0;
    return static_cast<uint32_t>(ring + area);
}

KernelDescriptor MoeW4A16Family::prefill_gemm(MoeW4A16Kernel which, const moe::PreparedMoeWeights& w,
                                              MoeActivation act, Target target, bool wgmma, bool wide, int block_m) {
    if (!is_prefill(which)) throw InvalidArgument("moe_w4a16: prefill_gemm() builds prefill_gate_up or prefill_down descriptors");
    const bool gate_up = which == MoeW4A16Kernel::prefill_gate_up;
    moe::require_layout(w, moe::W4Layout::decode_mma16, w.format, gate_up ? "prefill gate_up" : "prefill down");
    if (gate_up != w.gate_up)
        throw InvalidArgument(fmt::format("moe_w4a16: the prefill {} kernel needs {} weights", gate_up ? "gate_up" : "down",
                                          gate_up ? "interleaved gate/up" : "plain down"));
    KernelDescriptor d = weights_descriptor(w, target);
    d.config.block_m = static_cast<uint16_t>(block_m);
    d.config.flags = (gate_up ? 0u : 1u) | k_flag_prefill;
    if (act == MoeActivation::situ_glu && gate_up) d.config.flags |= k_flag_situ;
    if (!gate_up) d.config.flags |= k_flag_rows;
    if (w.wide_scales) d.config.flags |= k_flag_wide_scale;
    if (wgmma) d.config.flags |= k_flag_wgmma;
    if (wgmma && wide) d.config.flags |= k_flag_wide;
    return MoeW4A16Family().canonicalize(d);
}

KernelDescriptor MoeW4A16Family::combine(Target target) {
    KernelDescriptor d = base_descriptor(target);
    d.config.flags = k_flag_kind_hi;
    return MoeW4A16Family().canonicalize(d);
}

KernelDescriptor MoeW4A16Family::routing(int experts, int tiles, Target target) {
    KernelDescriptor d = base_descriptor(target);
    d.experts = experts;
    d.config.block_m = static_cast<uint16_t>(8 * tiles);
    d.config.flags = static_cast<uint32_t>(MoeW4A16Kernel::routing);
    return MoeW4A16Family().canonicalize(d);
}

KernelDescriptor MoeW4A16Family::dequant(const moe::PreparedMoeWeights& w, Target target) {
    moe::require_layout(w, moe::W4Layout::decode_mma16, w.format, "dequant");
    KernelDescriptor d = weights_descriptor(w, target);
    d.config.flags = static_cast<uint32_t>(MoeW4A16Kernel::dequant);
    if (w.wide_scales) d.config.flags |= k_flag_wide_scale;
    return MoeW4A16Family().canonicalize(d);
}

static void expect_kind(const LoadedKernel& k, MoeW4A16Kernel want, const char* what) {
    if (k.desc.family.view() != MoeW4A16Family::k_name || MoeW4A16Family::kind(k.desc) != want)
        throw InvalidArgument(fmt::format("{}: kernel is {}", what, to_string(k.desc)));
}

// The decode GEMMs: one CTA per SM, launched as a programmatic dependent of the previous kernel (they
// start with griddepcontrol.wait). `smem`: dynamic shared memory, the kernel's own by default.
static void launch_persistent(const LoadedKernel& k, void* params, int sm_count, CUstream stream, uint32_t smem = 0) {
    if (sm_count < 1) throw InvalidArgument(fmt::format("{}: no SMs", k.kernel.name()));
    void* args[] = {params};
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(sm_count), 1, 1};
    dims.block = {static_cast<uint32_t>(MoeW4A16Family::k_threads), 1, 1};
    dims.smem = smem ? smem : k.dynamic_smem;
    dims.overlap_prior = true;
    runtime::launch(k.kernel, dims, stream, args);
}

void launch_moe_w4a16_gemm(const LoadedKernel& k, const MoeW4A16DecodeParams& p, int sm_count, CUstream stream) {
    const MoeW4A16Kernel which = MoeW4A16Family::kind(k.desc);
    if (k.desc.family.view() != MoeW4A16Family::k_name ||
        (which != MoeW4A16Kernel::gate_up && which != MoeW4A16Kernel::down))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_gemm: kernel is {}", to_string(k.desc)));
    if (p.n_pad != k.desc.n || p.k_pad != round_up(k.desc.k, 64) || p.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_gemm: weights [{}, {}] do not match kernel {}", p.n_pad,
                                          p.k_real, to_string(k.desc)));
    MoeW4A16DecodeParams copy = p;
    launch_persistent(k, &copy, sm_count, stream);
}

void launch_moe_w4a16_fused(const LoadedKernel& k, const MoeW4A16FusedParams& p, int sm_count, CUstream stream) {
    if (k.desc.family.view() != MoeW4A16Family::k_name || MoeW4A16Family::kind(k.desc) != MoeW4A16Kernel::gate_up ||
        !(k.desc.config.flags & MoeW4A16Family::k_flag_fused))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_fused: kernel is {}", to_string(k.desc)));
    const MoeW4A16DecodeParams& gate_up = p.gate_up;
    const MoeW4A16DecodeParams& down = p.down;
    if (gate_up.n_pad != k.desc.n || gate_up.k_pad != round_up(k.desc.k, 64) || gate_up.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_fused: gate_up weights [{}, {}] do not match kernel {}",
                                          gate_up.n_pad, gate_up.k_real, to_string(k.desc)));
    if (down.k_pad != gate_up.n_pad / 2 || down.n_pad < gate_up.k_real || down.k_pad % k.desc.config.block_k != 0)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_fused: down weights [{}, {}] do not chain with gate_up [{}, {}]",
                                          down.n_pad, down.k_pad, gate_up.n_pad, gate_up.k_real));
    if (!p.gu_done || !p.dn_done || !gate_up.work || !p.topk_ids || !p.topk_weights || !p.out || !down.out)
        throw InvalidArgument("launch_moe_w4a16_fused: missing counters, routing inputs or outputs");
    if (down.n_real > p.out_stride || down.out_stride < down.n_real)
        throw InvalidArgument("launch_moe_w4a16_fused: output strides narrower than the output");
    const int64_t slots = int64_t(gate_up.num_tokens) * p.topk;
    const uint32_t smem =
        MoeW4A16Family::fused_call_smem(k.desc, slots, p.num_experts, p.mblock_cap, p.topk, p.k_groups);
    if (smem == 0)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_fused: {} routed slots over {} experts ({} m-blocks) do not "
                                          "fit the kernel's shared memory",
                                          slots, p.num_experts, p.mblock_cap));
    MoeW4A16FusedParams copy = p;
    launch_persistent(k, &copy, sm_count, stream, smem);
}

void launch_moe_w4a16_prefill(const LoadedKernel& k, const MoeW4A16DecodeParams& p, int mblock_cap, CUstream stream) {
    if (k.desc.family.view() != MoeW4A16Family::k_name || !MoeW4A16Family::is_prefill(MoeW4A16Family::kind(k.desc)))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: kernel is {}", to_string(k.desc)));
    if (p.n_pad != k.desc.n || p.k_pad != round_up(k.desc.k, 64) || p.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: weights [{}, {}] do not match kernel {}", p.n_pad,
                                          p.k_real, to_string(k.desc)));
    if (mblock_cap < 0) throw InvalidArgument("launch_moe_w4a16_prefill: negative m-block capacity");
    // (the warp-specialised kernel addresses token rows with 32-bit element offsets)
    // (gate_up reads token rows, down the m-blocks' sorted rows)
    const int64_t x_rows = MoeW4A16Family::kind(k.desc) == MoeW4A16Kernel::prefill_gate_up
                               ? p.num_tokens
                               : static_cast<int64_t>(mblock_cap) * k.desc.config.block_m;
    if (MoeW4A16Family::prefill_ws(k.desc) && x_rows * p.x_stride >= (int64_t(1) << 32))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: {} rows x {} inputs exceed 2^32 elements for "
                                          "block_m {} (use block_m 64)",
                                          x_rows, p.x_stride, k.desc.config.block_m));
    const int cols = (p.n_pad + k.desc.config.block_n - 1) / k.desc.config.block_n;  // CTAs per m-block
    const int64_t ctas = static_cast<int64_t>(mblock_cap) * cols;
    if (ctas > 0x7fffffff)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_prefill: {} m-blocks x {} CTAs exceed the grid", mblock_cap, cols));
    if (ctas == 0) return;
    MoeW4A16DecodeParams copy = p;
    void* args[] = {&copy};
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(ctas), 1, 1};
    dims.block = {static_cast<uint32_t>(32 * k.desc.config.warps), 1, 1};
    dims.smem = k.dynamic_smem;
    runtime::launch(k.kernel, dims, stream, args);
}

int moe_w4a16_routing_ctas(int64_t slots) {
    return static_cast<int>(std::clamp<int64_t>(slots / 2048, 1, 32));
}

void launch_moe_w4a16_routing(const LoadedKernel& k, const MoeW4A16RoutingParams& p, CUstream stream) {
    expect_kind(k, MoeW4A16Kernel::routing, "launch_moe_w4a16_routing");
    if (p.num_experts != k.desc.experts)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_routing: {} experts, kernel built for {}", p.num_experts,
                                          k.desc.experts));
    MoeW4A16RoutingParams copy = p;
    void* args[] = {&copy};
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(moe_w4a16_routing_ctas(static_cast<int64_t>(p.num_tokens) * p.topk)), 1, 1};
    dims.block = {1024, 1, 1};
    dims.smem = k.dynamic_smem;
    runtime::launch(k.kernel, dims, stream, args);
}

void launch_moe_w4a16_combine(const LoadedKernel& k, const MoeW4A16CombineParams& p, int sm_count, CUstream stream) {
    expect_kind(k, MoeW4A16Kernel::combine, "launch_moe_w4a16_combine");
    if (p.num_tokens < 0 || p.topk < 1 || p.n < 1)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_combine: {} tokens, topk {}, {} columns", p.num_tokens,
                                          p.topk, p.n));
    if (p.num_tokens == 0) return;
    MoeW4A16CombineParams copy = p;
    void* args[] = {&copy};
    runtime::LaunchDims dims;
    // work items (token, 1024 columns), templates/device/moe_w4a16_combine.cuh
    const int64_t items = static_cast<int64_t>(p.num_tokens) * ((p.n + 1023) / 1024);
    dims.grid = {static_cast<uint32_t>(std::min<int64_t>(items, 16 * std::max(1, sm_count))), 1, 1};
    dims.block = {128, 1, 1};
    dims.overlap_prior = true;  // the kernel waits for its predecessor (griddepcontrol.wait)
    runtime::launch(k.kernel, dims, stream, args);
}

void launch_moe_w4a16_dequant(const LoadedKernel& k, const MoeW4A16DequantParams& p, CUstream stream) {
    expect_kind(k, MoeW4A16Kernel::dequant, "launch_moe_w4a16_dequant");
    if (p.n_pad != k.desc.n || p.k_pad != round_up(k.desc.k, 64))
        throw InvalidArgument(fmt::format("launch_moe_w4a16_dequant: matrix [{}, {}] does not match kernel {}", p.n_pad,
                                          p.k_pad, to_string(k.desc)));
    MoeW4A16DequantParams copy = p;
    void* args[] = {&copy};
    runtime::LaunchDims dims;
    dims.grid = {128, 1, 1};
    dims.block = {256, 1, 1};
    runtime::launch(k.kernel, dims, stream, args);
}

}  // namespace kiln::jit
