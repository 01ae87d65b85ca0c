// Family `moe_w4a16`, mode `indexed`: the W4A16 routed-expert kernels (INT4 group-32 with bf16 scales,
// MXFP4 group-32 with E8M0 scales), generated from templates/device/moe_w4a16_*.cuh. One descriptor
// names one of seven kernels (config.flags bits 0-1, bit 7 and bit 8):
//
//   gate_up  n = layout rows (2 x intermediate, padded), k = hidden; fused SiLU-GLU / SiTU-GLU epilogue
//   down     n = layout rows (hidden, padded), k = intermediate; router-weighted, combined per token with
//            fp32 atomics (or, flag bit 6, written as one bf16 row per routed row for `combine`)
//   routing  experts; top-k ids -> per-expert rows in m-blocks of block_m, their tokens and weights
//   dequant  n, k; expands one expert matrix from the kernel layout to bf16 (fused path, for tests)
//   combine  sums each token's router-weighted down rows (the rows mode of down), deterministic order
//   prefill gate_up  (bit 8 + kind gate_up) gate_up for prefill-sized batches (moe_w4a16_prefill.cuh):
//            one CTA of 256 threads per (m-block, 128-row super-block), grid = m-block capacity x
//            n / 128; block_m 64, one 16-row block per warp (kRB 1), the decode layout's weights;
//            block_k 128 (two records per K step) when K padded to 64 is a multiple of 128, else 64
//   prefill down     (bit 8 + kind down) the same for down, always in the rows mode (flag bit 6 set):
//            router-weighted bf16 rows for `combine`
//   Flag bit 10 on a prefill kind names its warpgroup-MMA version (moe_w4a16_prefill_wgmma.cuh, sm_90a
//   targets only): the same tiles, layout and epilogues, wgmma m64nNk16 with the dequantised weights in
//   registers; its own shared-memory plan (four token stages, weight refills two steps behind); block_n
//   = 128 x the super-blocks a CTA walks (prefill_superblocks_per_cta: several for short K). Flag bit 11
//   (requested; kept where a CTA walks one super-block and N has two): the wide CTA, two super-blocks
//   side by side (512 threads, one CTA per SM, block_n 256), the token tile read once per 256 rows.
//   block_m 128 or 192 (wgmma only; routing with the same block_m):
//   both prefill GEMMs are the warp-specialised kernel (moe_w4a16_prefill_wgmma_ws.cuh: one m-block per
//   CTA with wgmma N up to 192, a producer warpgroup feeding a ring of one-record slots through full /
//   empty mbarriers, 384 threads, one CTA per SM, block_k 64, `stages` = ring slots, the token tile
//   resident for short K); its down writes its rows as tiles of 64 columns (one bulk copy each). The
//   router weight goes into its gate_up's intermediate (before the rounding) instead of down's rows, so
//   the two run as a pair with the same block_m.
//
// Baked in: weight format, n, k (their padding and whether K needs masking), block_m = 8 x token tiles
// (8, 16 or 32), pipeline stages, block_k = 64 x K records per stage, the activation (flag bit 2), the
// wide-scale MXFP4 path (flag bit 3, for E8M0 scale bytes above 128), the schedule (flag bit 5:
// dynamic item claiming instead of static per-SM shares) and the rows mode of down (flag bit 6).
// Flag bit 9 on a dynamic gate_up names the fused decode kernel (moe_w4a16_decode_fused): the routing
// (computed by every CTA in its shared memory), every gate_up item, every down item in the rows mode and
// the combine, in one persistent launch (the down matrix is the gate_up one transposed in shape: n =
// hidden padded, k = n / 2); device target only.
// M is never baked in. The decode GEMMs run one persistent CTA of 640 threads per SM (grid = SM
// count); the prefill GEMMs two CTAs of 256 threads per SM (stages: the deepest weight ring under
// 112 KB of shared memory, as prefill_default_stages<> computes it for its block_k), the
// warp-specialised gate_up one CTA of 384; the routing kernel one CTA (block_m 8, 16, 32 or 64, and
// 128 or 192 for the large prefill m-blocks).
// Host target (templates/host/moe_w4a16.hpp): the same five kernels and parameter blocks on the host
// thread pool; they bake in the format, n, k, block_m (8, 16, 32 or 64), the activation, the rows mode
// of down and (routing) the expert count; stages, block_k, warps, the schedule, the K mask and the
// wide-scale path do not apply there and are zero. The prefill kinds canonicalise to the host gate_up /
// down rows kernel with block_m 64 (flag bit 8 cleared): the same computation, one cached kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>

#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "jit/moe_w4a16_weights.hpp"

namespace kiln::jit {

enum class MoeW4A16Kernel : uint32_t {
    gate_up = 0,
    down = 1,
    routing = 2,
    dequant = 3,
    combine = 4,
    prefill_gate_up = 5,  // flags: kind bits gate_up + k_flag_prefill
    prefill_down = 6,     // flags: kind bits down + k_flag_prefill (+ k_flag_rows)
};
enum class MoeActivation : uint8_t { silu_glu = 0, situ_glu = 1 };
// Work distribution of the GEMMs (templates/device/moe_w4a16_decode.cuh, kSched).
enum class MoeW4A16Schedule : uint8_t { static_shares = 0, dynamic = 1 };

class MoeW4A16Family final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16";
    static constexpr uint32_t k_flag_kind_mask = 3u;
    static constexpr uint32_t k_flag_situ = 1u << 2;
    static constexpr uint32_t k_flag_wide_scale = 1u << 3;
    static constexpr uint32_t k_flag_mask_k = 1u << 4;  // derived: K is not a multiple of 64
    static constexpr uint32_t k_flag_dynamic = 1u << 5;  // gate_up / down: dynamic schedule
    static constexpr uint32_t k_flag_rows = 1u << 6;     // down: bf16 rows for the combine kernel
    static constexpr uint32_t k_flag_kind_hi = 1u << 7;  // kind bit 2 (combine)
    static constexpr uint32_t k_flag_prefill = 1u << 8;  // gate_up / down: the prefill GEMM
    static constexpr uint32_t k_flag_fused = 1u << 9;    // gate_up (dynamic): gate_up + down rows in one launch
    static constexpr uint32_t k_flag_wgmma = 1u << 10;   // prefill gate_up / down: warpgroup MMA (sm_90a)
    static constexpr uint32_t k_flag_wide = 1u << 11;    // wgmma prefill: two super-blocks side by side per CTA
    static constexpr int k_threads = 640;  // 4 groups x (4 consumer warps + 1 producer warp)
    static constexpr int k_prefill_threads = 256;
    static constexpr int k_prefill_ws_threads = 384;  // block_m 128 / 192: 2 consumer + 1 producer warpgroups
    static constexpr int k_prefill_block_m = 64;
    static constexpr int k_superblock_rows = 128;
    static constexpr int k_max_experts = 4096;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "W4A16 MoE (INT4 / MXFP4 group-32): routing prep, fused gate_up + GLU, combined down";
    }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override {
        return "kernel (fl bits 0-1 + bit 7: gate_up, down, routing, dequant, combine; + bit 8: prefill gate_up, "
               "prefill down), weight format, n, k, experts (routing); config bm (8/16/32 rows per m-block, 64 for "
               "prefill and its routing), st (stages), bk (64/128), fl bit 2 SiTU, bit 3 wide scales, bit 5 dynamic "
               "schedule, bit 6 down rows";
    }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;  // templates/host/moe_w4a16.hpp

    static MoeW4A16Kernel kind(const KernelDescriptor& d) {
        const uint32_t lo = d.config.flags & k_flag_kind_mask;
        if ((d.config.flags & k_flag_prefill) && lo <= 1u && !(d.config.flags & k_flag_kind_hi))
            return static_cast<MoeW4A16Kernel>(5u + lo);
        return static_cast<MoeW4A16Kernel>(lo | ((d.config.flags & k_flag_kind_hi) ? 4u : 0u));
    }
    static bool is_gemm(MoeW4A16Kernel k) {
        return k == MoeW4A16Kernel::gate_up || k == MoeW4A16Kernel::down || is_prefill(k);
    }
    static bool is_prefill(MoeW4A16Kernel k) {
        return k == MoeW4A16Kernel::prefill_gate_up || k == MoeW4A16Kernel::prefill_down;
    }

    // Canonical descriptors. `tiles` is 1, 2 or 4 token tiles of 8 rows per m-block. `rows` (down only):
    // write one bf16 row per routed row for the combine kernel instead of combining with fp32 atomics.
    // block_k: inputs per pipeline stage (64, 128 or 256 dividing K padded to 64; 0: 256 where K and a
    // two-stage ring allow, else 128 where K allows, else 64).
    static KernelDescriptor gemm(MoeW4A16Kernel which, const moe::PreparedMoeWeights& w, MoeActivation act, int tiles,
                                 Target target, MoeW4A16Schedule schedule = MoeW4A16Schedule::static_shares,
                                 bool rows = false, int block_k = 0);
    // Whether gate_up weights of layout rows n (2 x intermediate) and inputs k have a fused decode
    // kernel: down's K (n / 2) and k must be whole numbers of its pipeline stages (block_k inputs; 0:
    // the default, 128 where K allows, else 64; the kernel then takes 256 where both allow).
    static bool fusable(int n, int k, int block_k = 0);
    // The fused decode kernel (gate_up + down rows, dynamic schedule) for these gate_up weights.
    // stages / block_k: the ring depth and inputs per stage (64, 128 or 256); 0 = the defaults (256
    // where K, down's K and a two-stage ring allow, else 128 where K allows, else 64; the deepest ring
    // that fits).
    static KernelDescriptor fused(const moe::PreparedMoeWeights& gate_up, MoeActivation act, int tiles, Target target,
                                  int stages = 0, int block_k = 0);
    // Dynamic shared memory of one fused call of `slots` routed slots (M x topk, ids of other ranks
    // included) over `experts` local experts with `mblock_cap` m-blocks: the ring, then the routing
    // (m-block descriptors, the slot of every sorted row); the routing's scratch lives in the ring's
    // bytes while the kernel routes; with k_groups > 1 the teams' claim slots and partial sums after it.
    // 0 where the call does not fit (227 KB, 65,535 slots, top-k 32).
    static uint32_t fused_call_smem(const KernelDescriptor& fused, int64_t slots, int experts, int mblock_cap, int topk,
                                    int k_groups = 1);
    // Whether the fused kernel `fused` can share each item among k_groups warp groups (1, 2 or 4): m-blocks
    // of up to 16 rows, and every part of gate_up's and down's K stages must hold at least one stage
    // (down's K is gate_up's n / 2).
    static bool fused_k_groups_ok(const KernelDescriptor& fused, int k_groups);
    // The prefill GEMMs (prefill_gate_up or prefill_down; down always writes rows). `wgmma`: the
    // warpgroup-MMA version (refused unless the target is sm_90a). `block_m` 64, or 128 / 192 with wgmma:
    // the warp-specialised kernel for large m-blocks.
    static KernelDescriptor prefill_gemm(MoeW4A16Kernel which, const moe::PreparedMoeWeights& w, MoeActivation act,
                                         Target target, bool wgmma = false, bool wide = false, int block_m = 64);
    // Whether a prefill descriptor names the warp-specialised kernel (block_m 128 / 192).
    static bool prefill_ws(const KernelDescriptor& d) { return is_prefill(kind(d)) && d.config.block_m > k_prefill_block_m; }
    // Whether `target` runs the warpgroup-MMA prefill GEMMs (sm_90a).
    static bool has_wgmma(Target target) { return !target.is_host() && target.arch == 90 && target.suffix == 'a'; }
    static KernelDescriptor combine(Target target);
    // `tiles`: 1, 2, 4 or 8 (block_m 64, the prefill GEMMs' m-blocks).
    static KernelDescriptor routing(int experts, int tiles, Target target);
    static KernelDescriptor dequant(const moe::PreparedMoeWeights& w, Target target);
};

// Shared memory of the decode GEMMs, mirroring templates/device/moe_w4a16_decode.cuh.
int moe_w4a16_stage_bytes(WeightFormat f, int tiles, int recs);
int moe_w4a16_default_stages(WeightFormat f, int tiles, int recs);
uint32_t moe_w4a16_gemm_smem(WeightFormat f, int tiles, int stages, int recs);
// Shared memory of the prefill GEMMs (block_m 64, `recs` 64-wide records per K step), mirroring
// prefill_smem_bytes / prefill_default_stages of templates/device/moe_w4a16_prefill.cuh; the limit keeps
// two CTAs per SM.
constexpr uint32_t k_moe_w4a16_prefill_smem_limit = 114688;
uint32_t moe_w4a16_prefill_smem(WeightFormat f, int stages, int recs);
int moe_w4a16_prefill_default_stages(WeightFormat f, int recs);
// The same for the warpgroup-MMA prefill GEMMs (prefill_wgmma_smem_bytes / prefill_wgmma_default_stages of
// templates/device/moe_w4a16_prefill_wgmma.cuh); at least three weight stages.
// `par`: super-blocks side by side (2: the wide CTA, alone on its SM: up to 227 KB).
uint32_t moe_w4a16_prefill_wgmma_smem(WeightFormat f, int stages, int recs, int par = 1);
int moe_w4a16_prefill_wgmma_default_stages(WeightFormat f, int recs, int par = 1);
// 128-row super-blocks per CTA of the warpgroup-MMA prefill GEMMs (block_n / 128): the largest power of two
// up to 8 that keeps a CTA at 16 K steps or fewer (1 from 16 steps, i.e. K >= 2048), at least 1, at most
// n / 128.
int prefill_superblocks_per_cta(int n, int k);
// The warp-specialised wgmma prefill GEMMs (block_m 128 / 192, templates/device/moe_w4a16_prefill_wgmma_ws.cuh,
// prefill_ws_smem_bytes): `slots` ring slots of one weight record (+ one token record unless the token tile
// is resident), down's staging tile, one CTA per SM. Resident records: K / 64 where the whole tile fits
// next to 8 slots, else 0.
uint32_t moe_w4a16_prefill_ws_smem(WeightFormat f, int block_m, int slots, int resident, bool down = false);
int prefill_ws_resident_records(WeightFormat f, int block_m, int k, bool down = false);
int moe_w4a16_prefill_ws_default_slots(WeightFormat f, int block_m, int resident, bool down = false);
// Super-blocks a CTA of that kernel walks: K of 8 records or fewer: up to 16, spread evenly (K2 TP8 down: 56
// super-blocks, 4 CTAs of 14); else the largest power of two up to 8 keeping it at 32 records or fewer.
int prefill_ws_superblocks_per_cta(int n, int k);

// Kernel parameters, laid out exactly like the device structs they are passed as.
struct MoeW4A16DecodeParams {   // kiln_dev::moe::DecodeParams
    CUdeviceptr weights;        // expert 0's records
    uint64_t expert_stride;
    CUdeviceptr x;              // gate_up: activations [M, x_stride]; down: intermediate
    int32_t x_stride, k_real, k_pad, n_pad, n_real;
    CUdeviceptr num_mblocks, mblock_info, sorted_token, sorted_weight;
    int32_t num_tokens;
    CUdeviceptr inter;
    int32_t inter_stride;
    CUdeviceptr acc;
    int32_t acc_stride;
    CUdeviceptr out;
    int32_t out_stride;
    CUdeviceptr counters;
    // dynamic schedule
    CUdeviceptr work;       // int32 [2], zero between calls
    CUdeviceptr split_acc;  // fp32 gate_up K-split partials, zero between calls
    CUdeviceptr split_cnt;  // int32 [split_cap x 4], zero between calls
    int32_t split_cap, k_chunk, split_max_items, order_window;
};
static_assert(sizeof(MoeW4A16DecodeParams) == 184);
static_assert(offsetof(MoeW4A16DecodeParams, work) == 144);
static_assert(offsetof(MoeW4A16DecodeParams, split_cap) == 168);
static_assert(offsetof(MoeW4A16DecodeParams, order_window) == 180);
static_assert(offsetof(MoeW4A16DecodeParams, num_mblocks) == 48);
static_assert(offsetof(MoeW4A16DecodeParams, inter) == 88);
static_assert(offsetof(MoeW4A16DecodeParams, acc) == 104);
static_assert(offsetof(MoeW4A16DecodeParams, out) == 120);
static_assert(offsetof(MoeW4A16DecodeParams, counters) == 136);

struct MoeW4A16FusedParams {  // kiln_dev::moe::FusedDecodeParams
    MoeW4A16DecodeParams gate_up, down;  // down.out: router-weighted rows by slot [M x topk, down.out_stride]
    CUdeviceptr gu_done;       // int32 [mblock_cap], zero between calls
    CUdeviceptr trace;         // optional: u64 [items + grid] globaltimer stamps (measurement)
    CUdeviceptr topk_ids, topk_weights;  // int32 / fp32 [M, topk]
    CUdeviceptr out;           // bf16 [M, out_stride]
    CUdeviceptr dn_done;       // int32 [1], zero between calls
    CUdeviceptr num_mblocks;   // optional: int32 [1], the call's m-block count
    int32_t topk, num_experts, mblock_cap, out_stride;
    int32_t k_groups;  // warp groups sharing each item: 1, 2 or 4 (MoeW4A16Family::fused_k_groups_ok)
    int32_t reserved;
};
static_assert(sizeof(MoeW4A16FusedParams) == 448);
static_assert(offsetof(MoeW4A16FusedParams, k_groups) == 440);
static_assert(offsetof(MoeW4A16FusedParams, gu_done) == 368);
static_assert(offsetof(MoeW4A16FusedParams, trace) == 376);
static_assert(offsetof(MoeW4A16FusedParams, num_mblocks) == 416);
static_assert(offsetof(MoeW4A16FusedParams, out_stride) == 436);

struct MoeW4A16RoutingParams {  // kiln_dev::moe::RoutingParams
    CUdeviceptr topk_ids, topk_weights, expert_count, num_mblocks, mblock_info, sorted_token, sorted_weight;
    int32_t num_tokens, topk, num_experts, mblock_cap;
    CUdeviceptr slot_pos;  // optional
};
static_assert(sizeof(MoeW4A16RoutingParams) == 80);
static_assert(offsetof(MoeW4A16RoutingParams, mblock_cap) == 68);
static_assert(offsetof(MoeW4A16RoutingParams, slot_pos) == 72);

struct MoeW4A16CombineParams {  // kiln_dev::moe::CombineParams
    CUdeviceptr rows;
    int32_t rows_stride;
    CUdeviceptr slot_pos;
    int32_t num_tokens, topk, n;
    CUdeviceptr out;
    int32_t out_stride;
    int32_t row_tile;  // > 0: rows in tiles of row_tile rows x 64 columns (the ws prefill down; see the template)
};
static_assert(sizeof(MoeW4A16CombineParams) == 56);
static_assert(offsetof(MoeW4A16CombineParams, row_tile) == 52);
static_assert(offsetof(MoeW4A16CombineParams, slot_pos) == 16);
static_assert(offsetof(MoeW4A16CombineParams, out) == 40);

struct MoeW4A16DequantParams {  // kiln_dev::moe::DequantParams
    CUdeviceptr weights, out;
    int32_t n_pad, k_pad;
};
static_assert(sizeof(MoeW4A16DequantParams) == 24);

// Launches (argument checks in jit/moe_w4a16.cpp, which owns the buffers). `sm_count` CTAs for the
// decode GEMMs; the prefill GEMMs take one CTA per (m-block, super-block) for `mblock_cap` m-blocks (the
// capacity the routing launch was given; CTAs past the device-side m-block count exit at once).
void launch_moe_w4a16_gemm(const LoadedKernel& k, const MoeW4A16DecodeParams& p, int sm_count, CUstream stream);
// The fused decode kernel: the whole call (routing, both GEMMs, combine) in one launch, with
// MoeW4A16Family::fused_call_smem bytes of shared memory (refused where the call does not fit).
void launch_moe_w4a16_fused(const LoadedKernel& k, const MoeW4A16FusedParams& p, int sm_count, CUstream stream);
void launch_moe_w4a16_prefill(const LoadedKernel& k, const MoeW4A16DecodeParams& p, int mblock_cap, CUstream stream);
// The routing launch's CTAs: one up to 4095 routed slots, then one per 2048 (at most 32); each counts
// every slot and scatters its share (templates/device/moe_w4a16_routing.cuh).
int moe_w4a16_routing_ctas(int64_t slots);
void launch_moe_w4a16_routing(const LoadedKernel& k, const MoeW4A16RoutingParams& p, CUstream stream);
void launch_moe_w4a16_dequant(const LoadedKernel& k, const MoeW4A16DequantParams& p, CUstream stream);
void launch_moe_w4a16_combine(const LoadedKernel& k, const MoeW4A16CombineParams& p, int sm_count, CUstream stream);

}  // namespace kiln::jit
