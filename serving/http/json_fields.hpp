// Reading request bodies: depth-limited JSON parsing and typed access to an object's fields, each
// failure an ApiError 400 naming the field ("temperature: expected a number, got a string").
// A field set to null counts as absent, as the OpenAI servers treat optional fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::serving::http {

using Json = nlohmann::ordered_json;

// Parses `body` as one JSON object. Malformed JSON (invalid UTF-8 included), nesting deeper than
// `max_depth` or a top level that is not an object throw ApiError 400.
Json parse_json_object(std::string_view body, int max_depth = 64);

// "a string", "an array", ... for messages.
const char* json_kind(const Json& j);

class Fields {
public:
    // `obj` must outlive this view. `prefix` is prepended to field names in errors ("stream_options.").
    explicit Fields(const Json& obj, std::string prefix = {});

    const Json* get(std::string_view key) const;  // nullptr when absent or null
    bool has(std::string_view key) const { return get(key) != nullptr; }
    std::string name(std::string_view key) const { return prefix_ + std::string(key); }

    std::optional<bool> boolean(std::string_view key) const;
    std::optional<double> number(std::string_view key) const;
    // Integral JSON numbers (2 and 2.0) within int64; anything else throws.
    std::optional<int64_t> integer(std::string_view key) const;
    // integer() limited to [lo, hi].
    std::optional<int64_t> integer_in(std::string_view key, int64_t lo, int64_t hi) const;
    std::optional<std::string> string(std::string_view key) const;
    const Json* object(std::string_view key) const;
    const Json* array(std::string_view key) const;

    [[noreturn]] void fail(std::string_view key, const std::string& what) const;
    [[noreturn]] void wrong_type(std::string_view key, const char* expected, const Json& got) const;

private:
    const Json& obj_;
    std::string prefix_;
};

// A JSON number as an int64 if it is integral and in range.
std::optional<int64_t> as_integer(const Json& j);

}  // namespace kiln::serving::http
