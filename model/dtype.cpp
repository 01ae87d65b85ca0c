#include "model/dtype.hpp"

#include <array>
#include <bit>
#include <cmath>

namespace kiln::model {

namespace {

struct DTypeInfo {
    DType type;
    std::string_view name;
    size_t size;
};

constexpr std::array<DTypeInfo, 16> kTypes{{
    {DType::boolean, "BOOL", 1}, {DType::u8, "U8", 1},        {DType::i8, "I8", 1},
    {DType::u16, "U16", 2},      {DType::i16, "I16", 2},      {DType::u32, "U32", 4},
    {DType::i32, "I32", 4},      {DType::u64, "U64", 8},      {DType::i64, "I64", 8},
    {DType::f16, "F16", 2},      {DType::bf16, "BF16", 2},    {DType::f32, "F32", 4},
    {DType::f64, "F64", 8},      {DType::f8_e4m3, "F8_E4M3", 1}, {DType::f8_e5m2, "F8_E5M2", 1},
    {DType::f8_e8m0, "F8_E8M0", 1},
}};

const DTypeInfo& info(DType t) {
    for (const auto& i : kTypes)
        if (i.type == t) return i;
    return kTypes[0];  // unreachable: every enumerator is listed
}

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
size_t dtype_size(DType t) { return info(t).size; }

std::optional<DType> parse_dtype(std::string_view name) {
    for (const auto& i : kTypes)
        if (i.name == name) return i.type;
    return std::nullopt;
}

bool is_float(DType t) {
    return t == DType::bf16 || t == DType::f16 || t == DType::f32 || t == DType::f64;
}

float bf16_to_fp32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

uint16_t fp32_to_bf16(float v) {
    uint32_t u = std::bit_cast<uint32_t>(v);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
        return uint16_t((u >> 16) | 0x0040u);  // quiet NaN, sign kept
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return uint16_t((u + rounding) >> 16);
}

float f16_to_fp32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        // zero or subnormal: man · 2^-24, exact in fp32
        float mag = std::ldexp(float(man), -24);
        return sign ? -mag : mag;
    }
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

}  // namespace kiln::model
