#include "model/tokenizer/python_json.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::model {

namespace {

void dump_string(const std::string& s, std::string& out) {
    out += '"';
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                out += fmt::format("\\u{:04x}", c);
            } else {
                out += ch;
            }
        }
    }
    out += '"';
}

void dump(const nlohmann::ordered_json& v, bool compact, std::string& out) {
    const char* item_sep = compact ? "," : ", ";
    const char* key_sep = compact ? ":" : ": ";
    switch (v.type()) {
    case nlohmann::json::value_t::object: {
        out += '{';
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            if (!first) out += item_sep;
            first = false;
            dump_string(k, out);
            out += key_sep;
            dump(x, compact, out);
        }
        out += '}';
        break;
    }
    case nlohmann::json::value_t::array: {
        out += '[';
        bool first = true;
        for (const auto& x : v) {
            if (!first) out += item_sep;
            first = false;
            dump(x, compact, out);
        }
        out += ']';
        break;
    }
    case nlohmann::json::value_t::string:
        dump_string(v.get_ref<const std::string&>(), out);
        break;
    case nlohmann::json::value_t::number_float: {
        const double d = v.get<double>();
        if (d != d) {
            out += "NaN";
        } else if (d == std::numeric_limits<double>::infinity()) {
            out += "Infinity";
        } else if (d == -std::numeric_limits<double>::infinity()) {
            out += "-Infinity";
        } else {
            out += v.dump();  // shortest round-trip, Python-style (1.0, 1e+16)
        }
        break;
    }
    default:
        out += v.dump();  // null, true, false, integers
    }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value, bool compact) {
    std::string out;
    dump(value, compact, out);
    return out;
}

std::string python_str(const nlohmann::ordered_json& v) {
    switch (v.type()) {
    case nlohmann::json::value_t::string: return v.get<std::string>();
    case nlohmann::json::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case nlohmann::json::value_t::null: return "None";
    case nlohmann::json::value_t::discarded: return "None";
    default: return python_json_dumps(v, false);
    }
}

nlohmann::ordered_json deep_sort(const nlohmann::ordered_json& v) {
    if (v.is_object()) {
        std::vector<std::string> keys;
        for (const auto& [k, x] : v.items()) keys.push_back(k);
        std::sort(keys.begin(), keys.end());
        nlohmann::ordered_json out = nlohmann::ordered_json::object();
        for (const auto& k : keys) out[k] = deep_sort(v.at(k));
        return out;
    }
    if (v.is_array()) {
        nlohmann::ordered_json out = nlohmann::ordered_json::array();
        for (const auto& x : v) out.push_back(deep_sort(x));
        return out;
    }
    return v;
}

bool python_truthy(const nlohmann::ordered_json& v) {
    switch (v.type()) {
    case nlohmann::json::value_t::null: return false;
    case nlohmann::json::value_t::discarded: return false;
    case nlohmann::json::value_t::boolean: return v.get<bool>();
    case nlohmann::json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case nlohmann::json::value_t::array:
    case nlohmann::json::value_t::object: return !v.empty();
    case nlohmann::json::value_t::number_float: return v.get<double>() != 0.0;
    default: return v.dump() != "0";
    }
}

}  // namespace kiln::model
