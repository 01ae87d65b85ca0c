// Element types of checkpoint tensors as safetensors spells them ("BF16", "I32", ...). The type itself is
// runtime's one DType; its conversions live in runtime/bf16.hpp.
#pragma once

#include <optional>
#include <string_view>

#include "runtime/tensor.hpp"

namespace kiln::model {

using runtime::DType;
using runtime::dtype_size;
using runtime::is_float;

// "BF16", "U8", ... as written in a safetensors header.
std::string_view safetensors_name(DType t);
// Inverse of safetensors_name; nullopt for a name kiln does not know.
std::optional<DType> parse_safetensors_dtype(std::string_view name);

}  // namespace kiln::model
