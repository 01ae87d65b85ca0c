#include "serving/http/json_fields.hpp"

#include <cmath>

#include <fmt/format.h>

#include "serving/http/api_error.hpp"

namespace kiln::serving::http {

namespace {

struct TooDeep {};

}  // namespace

Json parse_json_object(std::string_view body, int max_depth) {
    Json j;
    try {
        j = Json::parse(
            body.begin(), body.end(),
            [max_depth](int depth, Json::parse_event_t event, Json&) {
                if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
                    depth >= max_depth)
                    throw TooDeep{};
                return true;
            },
            true, false);
    } catch (const TooDeep&) {
        throw ApiError::bad_request(fmt::format("invalid JSON body: nested deeper than {} levels", max_depth));
    } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
        std::string what = e.what();
        // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
        if (auto p = what.find("] "); p != std::string::npos && what.rfind("[json.exception", 0) == 0)
            what = what.substr(p + 2);
        throw ApiError::bad_request("invalid JSON body: " + what);
    }
    if (!j.is_object())
        throw ApiError::bad_request(fmt::format("the request body must be a JSON object, got {}", json_kind(j)));
    return j;
}

const char* json_kind(const Json& j) {
    switch (j.type()) {
        case Json::value_t::null: return "null";
        case Json::value_t::object: return "an object";
        case Json::value_t::array: return "an array";
        case Json::value_t::string: return "a string";
        case Json::value_t::boolean: return "a boolean";
        case Json::value_t::number_integer:
        case Json::value_t::number_unsigned: return "an integer";
        case Json::value_t::number_float: return "a number";
        default: return "an unsupported value";
    }
}

std::optional<int64_t> as_integer(const Json& j) {
    if (j.is_number_integer()) {
        if (j.is_number_unsigned()) {
            const uint64_t u = j.get<uint64_t>();
            if (u > uint64_t(INT64_MAX)) return std::nullopt;
            return int64_t(u);
        }
        return j.get<int64_t>();
    }
    if (j.is_number_float()) {
        const double d = j.get<double>();
        // 2^63 is exactly representable; anything at or above it is out of range.
        if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
            return int64_t(d);
    }
    return std::nullopt;
}

Fields::Fields(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

const Json* Fields::get(std::string_view key) const {
    auto it = obj_.find(std::string(key));
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
}

void Fields::fail(std::string_view key, const std::string& what) const {
    throw ApiError::bad_request(fmt::format("{}: {}", name(key), what), name(key));
}

void Fields::wrong_type(std::string_view key, const char* expected, const Json& got) const {
    fail(key, fmt::format("expected {}, got {}", expected, json_kind(got)));
}

std::optional<bool> Fields::boolean(std::string_view key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
    return v->get<bool>();
}

std::optional<double> Fields::number(std::string_view key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(key, "a number", *v);
    return v->get<double>();
}

std::optional<int64_t> Fields::integer(std::string_view key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(key, "an integer", *v);
    auto i = as_integer(*v);
    if (!i) fail(key, fmt::format("expected an integer, got {}", v->dump()));
    return i;
}

std::optional<int64_t> Fields::integer_in(std::string_view key, int64_t lo, int64_t hi) const {
    auto i = integer(key);
    if (i && (*i < lo || *i > hi)) fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, *i));
    return i;
}

std::optional<std::string> Fields::string(std::string_view key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(key, "a string", *v);
    return v->get<std::string>();
}

const Json* Fields::object(std::string_view key) const {
    const Json* v = get(key);
    if (v && !v->is_object()) wrong_type(key, "an object", *v);
    return v;
}

const Json* Fields::array(std::string_view key) const {
    const Json* v = get(key);
    if (v && !v->is_array()) wrong_type(key, "an array", *v);
    return v;
}

}  // namespace kiln::serving::http
