#include "model/dtype.hpp"

#include <array>
#include <utility>

namespace kiln::model {

namespace {

constexpr std::array<std::pair<DType, std::string_view>, 16> k_names{{
    {DType::boolean, "BOOL"}, {DType::u8, "U8"},   {DType::i8, "I8"},         {DType::u16, "U16"},
    {DType::i16, "I16"},      {DType::u32, "U32"}, {DType::i32, "I32"},       {DType::u64, "U64"},
    {DType::i64, "I64"},      {DType::f16, "F16"}, {DType::bf16, "BF16"},     {DType::f32, "F32"},
    {DType::f64, "F64"},      {DType::f8_e4m3, "F8_E4M3"}, {DType::f8_e5m2, "F8_E5M2"}, {DType::f8_e8m0, "F8_E8M0"},
}};

}  // namespace

std::string_view safetensors_name(DType t) {
    for (const auto& [type, name] : k_names)
        if (type == t) return name;
    return "NONE";
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
    for (const auto& [type, n] : k_names)
        if (n == name) return type;
    return std::nullopt;
}

}  // namespace kiln::model
