// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it, which is what the
// Kimi chat renderers put into prompts: object keys in insertion order (use ordered_json), non-ASCII
// kept as UTF-8, control characters as \uXXXX (lowercase hex), and either the default separators
// (", ", ": ") or the compact ones (",", ":").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kiln::model {

std::string python_json_dumps(const nlohmann::ordered_json& value, bool compact);

// Python's str(value) for a JSON value: strings as they are, True/False/None, numbers as repr.
std::string python_str(const nlohmann::ordered_json& value);

// Recursively sorts object keys (Python's sorted() order: by code point, which is UTF-8 byte order).
nlohmann::ordered_json deep_sort(const nlohmann::ordered_json& value);

// Python truthiness of a JSON value (absent values are null).
bool python_truthy(const nlohmann::ordered_json& value);

}  // namespace kiln::model
