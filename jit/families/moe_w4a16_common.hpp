// What the moe_w4a16 families share: the matrix shape their kernels bake in, the activation, and the
// shared-memory arithmetic of templates/device/moe_w4a16_*.cuh (mirrored here so a descriptor can be
// checked and sized without compiling it).
//
// The families (one kernel entry point each, jit/families/moe_w4a16_*.hpp):
//   moe_w4a16_route         top-k ids -> per-expert rows in m-blocks of block_m
//   moe_w4a16_decode        one GEMM (gate_up with the GLU, or down) on the decode schedule
//   moe_w4a16_decode_fused  a whole decode call in one persistent launch (device only)
//   moe_w4a16_prefill       one GEMM on prefill-sized batches (mma.sync, wgmma, warp-specialised wgmma)
//   moe_w4a16_combine       sums each token's router-weighted down rows
//   moe_w4a16_dequant       one expert matrix back to bf16 (tests)
// Weights are in the decode_mma16 layout of model/weights/moe_w4a16 (bytes documented in
// templates/device/moe_w4a16_common.cuh).
#pragma once

#include <cstdint>
#include <string_view>

#include "jit/descriptor.hpp"

namespace kiln::jit::moe {

enum class Matrix : uint8_t { gate_up = 0, down = 1 };
enum class Activation : uint8_t { silu_glu = 0, situ_glu = 1 };
inline constexpr std::string_view k_matrix_names[] = {"gate_up", "down"};
inline constexpr std::string_view k_act_names[] = {"silu_glu", "situ_glu"};
inline constexpr std::string_view k_bool_names[] = {"false", "true"};

// One expert matrix as the kernels see it. gate_up: n_pad = 2 x the padded intermediate (gate and up rows
// interleaved), k = hidden; down: n_pad = hidden padded, k = the intermediate.
struct MatrixShape {
    WeightFormat format = WeightFormat::none;
    int32_t n_pad = 0;  // rows in the layout, a multiple of 128
    int32_t k = 0;      // logical inputs (the layout pads to 64)
    bool wide_scales = false;  // MXFP4 scale bytes above 128: the two-multiply path
};

constexpr int k_superblock_rows = 128;
constexpr int k_max_experts = 4096;
constexpr int k_decode_threads = 640;     // 4 groups x (4 consumer warps + 1 producer warp)
constexpr int k_prefill_threads = 256;
constexpr int k_prefill_ws_threads = 384;  // 2 consumer + 1 producer warpgroups
constexpr int k_prefill_block_m = 64;
constexpr uint32_t k_smem_limit = 232448;  // 227 KB of dynamic shared memory per CTA on sm_90
// The prefill GEMMs keep two CTAs per SM.
constexpr uint32_t k_prefill_smem_limit = 114688;

inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// The descriptor skeleton of family `family` (mode indexed) for `target`, with the matrix's format and shape.
KernelDescriptor base_descriptor(std::string_view family, Target target);
KernelDescriptor matrix_descriptor(std::string_view family, const MatrixShape& m, Target target);
// Checks and copies format, n, k (and act bf16) from `in` into `d`; throws InvalidArgument naming the field.
void take_matrix_shape(std::string_view family, const KernelDescriptor& in, KernelDescriptor& d);
// The start of every moe_w4a16 family's canonicalize: mode indexed, an sm_90a or host target, and the
// canonical skeleton (with the matrix shape when `matrix`).
KernelDescriptor canonical_start(std::string_view family, const KernelDescriptor& in, bool matrix);
// The GEMM families' matrix and activation fields: copied from `in` to `out`, the activation only for gate_up.
// Returns whether the matrix is gate_up.
void check_matrix_and_act(std::string_view family, uint8_t matrix, uint8_t act);
template <typename Config>
bool take_matrix_and_act(std::string_view family, const Config& in, Config& out) {
    check_matrix_and_act(family, in.matrix, in.act);
    out.matrix = in.matrix;
    out.act = in.matrix == static_cast<uint8_t>(Matrix::gate_up) ? in.act : 0;
    return in.matrix == static_cast<uint8_t>(Matrix::gate_up);
}
// Throws InvalidArgument unless `t` is sm_90a (bulk async copies, mbarriers, bf16x2 arithmetic).
void require_sm90a(std::string_view family, Target t);
// Whether `target` runs the warpgroup-MMA prefill GEMMs (sm_90a).
bool has_wgmma(Target target);

int record_bytes(WeightFormat f);
const char* device_format(WeightFormat f);  // "kiln_dev::moe::kFormatInt4", ...
const char* host_format(WeightFormat f);    // "kiln_host::moe::kFormatInt4", ...

// Decode GEMMs (templates/device/moe_w4a16_decode.cuh): one stage is `recs` 64-wide records, the token tile
// and a header; per group two mbarriers per stage; four groups.
int decode_stage_bytes(WeightFormat f, int tiles, int recs);
uint32_t decode_smem(WeightFormat f, int tiles, int stages, int recs);
int decode_default_stages(WeightFormat f, int tiles, int recs);  // the deepest ring up to 8 that fits
// Records per stage from block_k (64, 128 or 256, dividing K padded to 64), or by default 2 where K_pad % 128
// == 0, else 1.
int decode_records(int k_pad, int block_k);

// Prefill GEMMs, block_m 64 (templates/device/moe_w4a16_prefill*.cuh).
uint32_t prefill_smem(WeightFormat f, int stages, int recs);
int prefill_default_stages(WeightFormat f, int recs);
// The warpgroup-MMA version; `par` super-blocks side by side (2: the wide CTA, alone on its SM).
uint32_t prefill_wgmma_smem(WeightFormat f, int stages, int recs, int par = 1);
int prefill_wgmma_default_stages(WeightFormat f, int recs, int par = 1);
// 128-row super-blocks per wgmma CTA in sequence: the largest power of two up to 8 that keeps a CTA at 16
// K steps or fewer, at least 1, at most n / 128.
int prefill_superblocks_per_cta(int n, int k);
// The warp-specialised wgmma kernel (block_m 128 / 192): `slots` ring slots of one weight record (+ one
// token record unless the token tile is resident), down's staging tile; one CTA per SM. Resident records:
// K / 64 where the whole tile fits next to 8 slots, else 0.
uint32_t prefill_ws_smem(WeightFormat f, int block_m, int slots, int resident, bool down);
int prefill_ws_resident_records(WeightFormat f, int block_m, int k, bool down);
int prefill_ws_default_slots(WeightFormat f, int block_m, int resident, bool down);
// Super-blocks a CTA of that kernel walks: K of 8 records or fewer: up to 16, spread evenly; else the largest
// power of two up to 8 keeping it at 32 records or fewer.
int prefill_ws_superblocks_per_cta(int n, int k);

}  // namespace kiln::jit::moe
