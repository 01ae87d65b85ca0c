#include "runtime/env.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::env {

std::optional<std::string> get(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

static std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

bool get_bool(const char* name, bool fallback) {
    auto v = get(name);
    if (!v) return fallback;
    std::string s = lower(*v);
    if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
    if (s == "0" || s == "false" || s == "no" || s == "off") return false;
    throw InvalidArgument(fmt::format("{}={}: expected a boolean (1/0, true/false, yes/no, on/off)", name, *v));
}

int64_t get_int(const char* name, int64_t fallback) {
    auto v = get(name);
    if (!v) return fallback;
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v->c_str(), &end, 10);
    if (errno != 0 || end == v->c_str() || *end != '\0')
        throw InvalidArgument(fmt::format("{}={}: expected an integer", name, *v));
    return x;
}

uint64_t parse_size(const std::string& text) {
    std::string s = lower(text);
    s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || !std::isfinite(x) || x < 0)
        throw InvalidArgument(fmt::format("'{}' is not a size (examples: 512M, 2G, 1.5GiB, 100000)", text));
    std::string unit(end);
    if (!unit.empty() && unit.back() == 'b') unit.pop_back();
    if (!unit.empty() && unit.back() == 'i') unit.pop_back();
    double mult = 1;
    if (unit.empty()) mult = 1;
    else if (unit == "k") mult = 1024.0;
    else if (unit == "m") mult = 1024.0 * 1024;
    else if (unit == "g") mult = 1024.0 * 1024 * 1024;
    else if (unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
    else throw InvalidArgument(fmt::format("'{}' is not a size: unknown unit '{}'", text, end));
    const double bytes = x * mult;
    if (bytes >= 0x1p63) throw InvalidArgument(fmt::format("'{}' is too large a size (at most 8 EiB)", text));
    return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace kiln::env
