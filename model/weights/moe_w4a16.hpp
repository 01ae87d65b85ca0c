// Routed-expert weights of the moe_w4a16 kernels: the two checkpoint formats and the repacking into the
// kernels' layout, done once at load.
//
// Checkpoint formats (one expert matrix W [N out, K in], K % 32 == 0):
//   int4_g32_bf16   compressed-tensors `pack-quantized`: packed int32 [N, K/8], 8 codes per word along K,
//                   LSB first, code = q + 8; scale bf16 [N, K/32].  w = (code - 8) * scale.
//   mxfp4_g32_e8m0  compressed-tensors `mxfp4-pack-quantized`: packed uint8 [N, K/2], low nibble = even
//                   k; E2M1 codes (bit 3 sign); scale uint8 E8M0 [N, K/32].  w = e2m1 * 2^(scale - 127).
//
// Kernel layouts. The layout is chosen before packing and recorded in the prepared weights; every
// kernel checks it at dispatch (require_layout), so weights packed for one configuration can never be
// read by a kernel of the other.
//   decode_mma16   mma.sync m16n8k16 A-fragment order, 128-row super-blocks x 64-wide K records with
//                  the scales of each record right behind its weights (templates/device/
//                  moe_w4a16_common.cuh documents the bytes): one contiguous copy per pipeline stage
//                  feeds a decode warp group (4 warps x 2 row-blocks). Read by the decode kernels.
//   prefill_mma16  same fragment order, 64-row super-blocks (one warpgroup's rows). Read by the
//                  prefill kernels.
// gate_up matrices are stored with the gate (w1) and up (w3) rows interleaved per 8 rows, so that one
// m16n8k16 accumulator holds a gate value and its matching up value and the activation needs no
// data exchange. N is padded to a whole super-block (gate_up: the intermediate size to a multiple of 64,
// the K padding of the down matrix that reads it), K to a multiple of 64; padding is zero weights with
// unit scales.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "jit/descriptor.hpp"

namespace kiln::model::weights {

// The kernels' weight formats (jit/descriptor.hpp): int4_g32_bf16 and mxfp4_g32_e8m0 here.
using W4Format = jit::WeightFormat;
using jit::to_string;
enum class W4Layout : uint8_t { decode_mma16 = 1, prefill_mma16 = 2 };

std::string_view to_string(W4Layout l);  // "decode_mma16", "prefill_mma16"

// Record geometry of a layout.
int layout_superblock_rows(W4Layout l);              // 128 (decode) or 64 (prefill)
int layout_scale_bytes_per_block(W4Format f);        // per 16-row block and k64: 64 (int4) or 32 (mxfp4)
int layout_record_bytes(W4Format f, W4Layout l);     // one super-block x 64 inputs

// One checkpoint matrix, raw little-endian bytes exactly as stored in the safetensors file.
struct CheckpointMatrix {
    std::span<const std::byte> packed;
    std::span<const std::byte> scale;
};

struct PreparedMoeWeights {
    W4Format format{};
    W4Layout layout{};
    bool gate_up = false;      // rows are interleaved gate/up (w1/w3)
    bool wide_scales = false;  // mxfp4: some scale byte > 128 (kernels take the two-multiply path)
    int32_t experts = 0;
    int32_t n = 0;      // logical output rows: gate_up: the intermediate size I (per half); down: N
    int32_t k = 0;      // logical inputs
    int32_t n_pad = 0;  // rows in the layout, a multiple of the super-block (gate_up: 2 * padded I)
    int32_t k_pad = 0;  // inputs in the layout, multiple of 64
    uint64_t expert_stride = 0;  // bytes per expert
    std::vector<std::byte> bytes;

    uint64_t bytes_per_expert() const { return expert_stride; }
};

// Source of expert e's checkpoint matrix; part 0 = the matrix (down) or gate/w1, part 1 = up/w3.
using MatrixSource = std::function<CheckpointMatrix(int expert, int part)>;

// Repacks `experts` matrices. gate_up: each expert gives two [I, K] matrices (n = I); otherwise one
// [N, K]. Throws InvalidArgument for sizes the format cannot hold (K % 32, empty shapes), tensors of the
// wrong byte size, and NaN MXFP4 scales (255).
PreparedMoeWeights prepare_moe_weights(W4Format format, W4Layout layout, bool gate_up, int experts, int n, int k,
                                       const MatrixSource& source);

// The layout metadata prepare_moe_weights would produce for these sizes, without weights (bytes empty): what
// kernels bake in, for planning and cache builds. Throws InvalidArgument as prepare_moe_weights does.
PreparedMoeWeights moe_weights_layout(W4Format format, W4Layout layout, bool gate_up, int experts, int n, int k,
                                      bool wide_scales = false);

// Throws InvalidArgument naming both layouts when `w` was not packed for `expected` (e.g. prefill-packed
// weights handed to a decode kernel), or when its format differs.
void require_layout(const PreparedMoeWeights& w, W4Layout expected, W4Format format, std::string_view kernel);

// Inverse of the repacking for tests and inspection: expert e in logical order, exact fp32 values
// (rows [0, n) = the matrix, or gate rows then up rows for gate_up: [2n, k]).
void dequantize_prepared(const PreparedMoeWeights& w, int expert, std::span<float> out);

// The checkpoint-format dequantisers (exact fp32), element by element.
float int4_value(std::span<const std::byte> packed, std::span<const std::byte> scale, int k, int row, int col);
float mxfp4_value(std::span<const std::byte> packed, std::span<const std::byte> scale, int k, int row, int col);
float e2m1_value(unsigned nibble);

}  // namespace kiln::model::weights
