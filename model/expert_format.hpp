// Routed-expert weight formats and their exact CPU quantise / dequantise.
//
// A matrix W [rows = N (out), cols = K (in)] is stored as one of:
//   bf16       `.weight` bf16 [N, K].
//   int4_g32   compressed-tensors `pack-quantized` (Kimi K2.x): `.weight_packed` int32 [N, K/8], eight
//              4-bit codes per word along K, LSB first, code = q + 8; `.weight_scale` bf16 [N, K/32];
//              `.weight_shape` int64 [2] = (N, K).  w[n,k] = (code − 8) · scale[n, k/32].
//   mxfp4_g32  compressed-tensors `mxfp4-pack-quantized` (Kimi K3): `.weight_packed` uint8 [N, K/2],
//              low nibble = even k, high nibble = odd k; a nibble is E2M1 (bit 3 sign, bits 0-2 index
//              into {0, .5, 1, 1.5, 2, 3, 4, 6}); `.weight_scale` uint8 E8M0 [N, K/32].
//              w[n,k] = e2m1 · 2^(scale[n, k/32] − 127).
// K must be a multiple of 32 for the packed formats. Buffers are raw little-endian bytes exactly as they
// sit in a safetensors file (no alignment assumed). The dequantisers are the oracle the GPU kernels are
// tested against: they are written element by element, for clarity over speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kiln::model {

enum class ExpertFormat : uint8_t { bf16, int4_g32, mxfp4_g32 };

inline constexpr int64_t kExpertGroupSize = 32;

// "bf16", "int4", "mxfp4" (the spellings of --expert-format).
std::string_view expert_format_name(ExpertFormat f);
// Accepts "bf16", "int4", "int4_g32", "mxfp4", "mxfp4_g32".
std::optional<ExpertFormat> parse_expert_format(std::string_view s);

// One E2M1 nibble (low 4 bits of `nibble`) as a float: ±{0, .5, 1, 1.5, 2, 3, 4, 6}.
float e2m1_value(uint8_t nibble);
// An E8M0 scale byte as a float: 2^(s − 127); 255 is NaN.
float e8m0_value(uint8_t s);

// The stored tensors of one quantised matrix (raw bytes, ready to write).
struct PackedMatrix {
    std::vector<std::byte> packed;  // int32 [N, K/8] or uint8 [N, K/2]
    std::vector<std::byte> scale;   // bf16 [N, K/32] or uint8 [N, K/32]
};

// Symmetric INT4, group 32: scale = bf16(max|w| / 7), q = clamp(round_half_even(w / scale), −8, 7).
PackedMatrix quantize_int4_g32(std::span<const float> w, int64_t rows, int64_t cols);
// out must hold rows·cols floats.
void dequantize_int4_g32(std::span<const std::byte> packed, std::span<const std::byte> scale,
                         int64_t rows, int64_t cols, std::span<float> out);

// MXFP4, group 32: scale exponent e = ceil(log2(max|w| / 6)) (so nothing clips), each value rounded to
// the nearest E2M1 magnitude of w / 2^e (ties to the even code).
PackedMatrix quantize_mxfp4_g32(std::span<const float> w, int64_t rows, int64_t cols);
void dequantize_mxfp4_g32(std::span<const std::byte> packed, std::span<const std::byte> scale,
                          int64_t rows, int64_t cols, std::span<float> out);

// bf16 [rows, cols] bytes of w (round to nearest even).
std::vector<std::byte> to_bf16_bytes(std::span<const float> w);

// Bytes of the int4 `.weight_shape` tensor: int64 [2] = (rows, cols).
std::vector<std::byte> int4_weight_shape_bytes(int64_t rows, int64_t cols);

// Shapes of the stored tensors for a [rows, cols] matrix.
std::vector<int64_t> packed_shape(ExpertFormat f, int64_t rows, int64_t cols);
std::vector<int64_t> scale_shape(int64_t rows, int64_t cols);

}  // namespace kiln::model
