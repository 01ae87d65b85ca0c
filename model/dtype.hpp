// Element types of checkpoint tensors, spelled as safetensors spells them ("BF16", "I32", ...), plus
// the exact scalar conversions kiln needs on the CPU: bf16 and f16 to fp32 and fp32 to bf16
// (round to nearest even, NaN kept a NaN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::model {

enum class DType : uint8_t {
    boolean, u8, i8, u16, i16, u32, i32, u64, i64,
    f16, bf16, f32, f64,
    f8_e4m3, f8_e5m2, f8_e8m0,
};

// "BF16", "U8", ... as written in a safetensors header.
std::string_view dtype_name(DType t);
// Inverse of dtype_name; nullopt for a name kiln does not know.
std::optional<DType> parse_dtype(std::string_view name);
// Bytes per element.
size_t dtype_size(DType t);
// bf16, f16, f32, f64: the types to_fp32 reads.
bool is_float(DType t);

float bf16_to_fp32(uint16_t bits);
uint16_t fp32_to_bf16(float v);  // round to nearest, ties to even; NaN stays NaN
float f16_to_fp32(uint16_t bits);  // exact, subnormals and inf/NaN included

}  // namespace kiln::model
