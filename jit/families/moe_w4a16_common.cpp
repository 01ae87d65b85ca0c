#include "jit/families/moe_w4a16_common.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit::moe {

KernelDescriptor base_descriptor(std::string_view family, Target target) {
    KernelDescriptor d;
    d.family = ShortName(family);
    d.mode = ShortName("indexed");
    d.target = target;
    return d;
}

KernelDescriptor matrix_descriptor(std::string_view family, const MatrixShape& m, Target target) {
    KernelDescriptor d = base_descriptor(family, target);
    d.weight_format = m.format;
    d.n = m.n_pad;
    d.k = m.k;
    return d;
}

void take_matrix_shape(std::string_view family, const KernelDescriptor& in, KernelDescriptor& d) {
    if (in.weight_format != WeightFormat::int4_g32_bf16 && in.weight_format != WeightFormat::mxfp4_g32_e8m0)
        throw InvalidArgument(fmt::format("{}: weight format must be int4_g32_bf16 or mxfp4_g32_e8m0", family));
    if (in.n <= 0 || in.n % k_superblock_rows != 0)
        throw InvalidArgument(fmt::format("{}: n={} must be the layout's padded row count (a positive multiple of {})",
                                          family, in.n, k_superblock_rows));
    if (in.k <= 0 || in.k % 32 != 0)
        throw InvalidArgument(fmt::format("{}: k={} must be a positive multiple of the group size 32", family, in.k));
    d.weight_format = in.weight_format;
    d.n = in.n;
    d.k = in.k;
    d.act_dtype = runtime::DType::bf16;
}

KernelDescriptor canonical_start(std::string_view family, const KernelDescriptor& in, bool matrix) {
    if (!in.mode.empty() && in.mode.view() != "indexed")
        throw InvalidArgument(fmt::format("{}: unknown mode '{}' (modes: indexed)", family, in.mode.view()));
    if (!in.target.is_host()) require_sm90a(family, in.target);
    KernelDescriptor d = base_descriptor(family, in.target);
    if (matrix) take_matrix_shape(family, in, d);
    return d;
}

void check_matrix_and_act(std::string_view family, uint8_t matrix, uint8_t act) {
    if (matrix > 1) throw InvalidArgument(fmt::format("{}: matrix must be gate_up or down", family));
    if (act > 1) throw InvalidArgument(fmt::format("{}: act must be silu_glu or situ_glu", family));
    if (matrix == static_cast<uint8_t>(Matrix::down) && act != 0)
        throw InvalidArgument(fmt::format("{}: the activation belongs to gate_up", family));
}

void require_sm90a(std::string_view family, Target t) {
    if (t.arch < 90 || (t.arch == 90 && t.suffix != 'a'))
        throw InvalidArgument(fmt::format("{}: target {} is not supported (needs sm_90a: bulk async copies, mbarriers, "
                                          "bf16x2 arithmetic)",
                                          family, to_string(t)));
    if (t.arch != 90)
        throw InvalidArgument(
            fmt::format("{}: target {} has no tuned configuration yet (sm_90a only)", family, to_string(t)));
}

bool has_wgmma(Target target) { return !target.is_host() && target.arch == 90 && target.suffix == 'a'; }

int record_bytes(WeightFormat f) { return 8 * (512 + (f == WeightFormat::int4_g32_bf16 ? 64 : 32)); }

const char* device_format(WeightFormat f) {
    return f == WeightFormat::int4_g32_bf16 ? "kiln_dev::moe::kFormatInt4" : "kiln_dev::moe::kFormatMxfp4";
}

const char* host_format(WeightFormat f) {
    return f == WeightFormat::int4_g32_bf16 ? "kiln_host::moe::kFormatInt4" : "kiln_host::moe::kFormatMxfp4";
}

namespace {

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
    return std::max(1, std::min(c, n / k_superblock_rows));
}

}  // namespace

int decode_stage_bytes(WeightFormat f, int tiles, int recs) {
    const int x_stride = 128 * recs + 16;
    const int meta = recs * record_bytes(f) + 8 * tiles * x_stride;
    return round_up(meta + 32, 128);
}

uint32_t decode_smem(WeightFormat f, int tiles, int stages, int recs) {
    const int group = stages * decode_stage_bytes(f, tiles, recs) + round_up(16 * stages, 128);
    return static_cast<uint32_t>(4 * group);
}

int decode_default_stages(WeightFormat f, int tiles, int recs) {
    return deepest_ring(8, 2, k_smem_limit, [&](int s) { return decode_smem(f, tiles, s, recs); });
}

int decode_records(int k_pad, int block_k) {
    if (block_k == 0) return k_pad % 128 == 0 ? 2 : 1;
    if ((block_k != 64 && block_k != 128 && block_k != 256) || k_pad % block_k != 0)
        throw InvalidArgument(
            fmt::format("moe_w4a16: decode block_k {} (64, 128 or 256, dividing K padded to 64: {})", block_k, k_pad));
    return block_k / 64;
}

// PrefillSmem<kFormat, 8, recs>: 4 (one record per step) or 3 (two) token stages of 64 rows x (128 recs + 16)
// bytes, then the weight slots of `recs` records, then one mbarrier per stage of both rings.
uint32_t prefill_smem(WeightFormat f, int stages, int recs) {
    const int x_stages = recs == 1 ? 4 : 3, x_tile = 64 * (128 * recs + 16);
    return static_cast<uint32_t>(x_stages * x_tile + stages * recs * record_bytes(f) +
                                 round_up(8 * (stages + x_stages), 128));
}

int prefill_default_stages(WeightFormat f, int recs) {
    return deepest_ring(24, 2, k_prefill_smem_limit, [&](int s) { return prefill_smem(f, s, recs); });
}

// PrefillWgmmaSmem<kFormat, recs, par>: 4 token stages of 64 rows x 128 recs bytes (128-byte swizzle, no
// padding), the weight slots (par super-blocks x recs records), one mbarrier per stage of both rings.
uint32_t prefill_wgmma_smem(WeightFormat f, int stages, int recs, int par) {
    const int x_stages = 4, x_tile = 64 * 128 * recs;
    return static_cast<uint32_t>(x_stages * x_tile + stages * par * recs * record_bytes(f) +
                                 round_up(8 * (stages + x_stages), 128));
}

int prefill_wgmma_default_stages(WeightFormat f, int recs, int par) {
    const uint32_t limit = par == 2 ? k_smem_limit : k_prefill_smem_limit;
    return deepest_ring(24, 3, limit, [&](int s) { return prefill_wgmma_smem(f, s, recs, par); });
}

int prefill_superblocks_per_cta(int n, int k) {
    const int recs = round_up(k, 64) % 128 == 0 ? 2 : 1;
    return superblocks_in_sequence(n, round_up(k, 64) / (64 * recs), 16);
}

uint32_t prefill_ws_smem(WeightFormat f, int block_m, int slots, int resident, bool down) {
    const int x_rec = block_m * 128;
    // down: two 64-column tiles of bf16 rows; gate_up: the m-block's router weights
    const int staging = down ? block_m * 256 : block_m * 4;
    return static_cast<uint32_t>((resident > 0 ? resident : slots) * x_rec + slots * record_bytes(f) + staging +
                                 round_up(8 * (2 * slots + std::max(1, resident)), 128));
}

int prefill_ws_resident_records(WeightFormat f, int block_m, int k, bool down) {
    const int recs = round_up(k, 64) / 64;
    return prefill_ws_smem(f, block_m, 8, recs, down) <= k_smem_limit ? recs : 0;
}

int prefill_ws_default_slots(WeightFormat f, int block_m, int resident, bool down) {
    return deepest_ring(24, 2, k_smem_limit, [&](int s) { return prefill_ws_smem(f, block_m, s, resident, down); });
}

int prefill_ws_superblocks_per_cta(int n, int k) {
    const int recs = round_up(k, 64) / 64;
    if (recs > 8) return superblocks_in_sequence(n, recs, 32);
    // Short K: a CTA's prologue (its resident token tile, the first records in flight) is paid per CTA, so
    // up to 16 super-blocks, spread evenly over the fewest CTAs per m-block.
    const int nsb = std::max(1, n / k_superblock_rows), cols = (nsb + 15) / 16;
    return (nsb + cols - 1) / cols;
}

}  // namespace kiln::jit::moe
