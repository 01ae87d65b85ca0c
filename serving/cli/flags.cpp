#include "serving/cli/flags.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace kiln::cli {

namespace {

// Integers up to 2^64 in magnitude are exact in the x86-64 long double (64-bit mantissa).
std::string integer_text(long double v) {
    return v < 0 ? fmt::format("{}", static_cast<long long>(v)) : fmt::format("{}", static_cast<unsigned long long>(v));
}

}  // namespace

CLI::Validator integer_range(long double lo, long double hi) {
    const std::string range = fmt::format("[{}, {}]", integer_text(lo), integer_text(hi));
    return CLI::Validator(
        [lo, hi, range](std::string& text) -> std::string {
            std::string_view t(text);
            if (!t.empty() && t.front() == '+') t.remove_prefix(1);
            const bool negative = !t.empty() && t.front() == '-';
            long double value = 0;
            std::string canonical;
            std::from_chars_result r{};
            if (negative) {
                long long v = 0;
                r = std::from_chars(t.data(), t.data() + t.size(), v);
                value = static_cast<long double>(v);
                canonical = std::to_string(v);
            } else {
                unsigned long long v = 0;
                r = std::from_chars(t.data(), t.data() + t.size(), v);
                value = static_cast<long double>(v);
                canonical = std::to_string(v);
            }
            if (t.empty() || r.ptr != t.data() + t.size() || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
                return fmt::format("'{}' is not an integer", text);
            if (r.ec == std::errc::result_out_of_range || value < lo || value > hi)
                return fmt::format("{} is out of range {}", text, range);
            text = canonical;
            return std::string();
        },
        "INT in " + range);
}

CLI::Validator real_range(long double lo, long double hi) {
    const std::string range = fmt::format("[{}, {}]", static_cast<double>(lo), static_cast<double>(hi));
    return CLI::Validator(
        [lo, hi, range](std::string& text) -> std::string {
            char* end = nullptr;
            const long double v = text.empty() ? 0.0L : std::strtold(text.c_str(), &end);
            if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
                return fmt::format("'{}' is not a finite number", text);
            if (v < lo || v > hi) return fmt::format("{} is out of range {}", text, range);
            return std::string();
        },
        "NUMBER in " + range);
}

uint64_t parse_size_flag(const char* flag, const std::string& text) {
    try {
        return env::parse_size(text);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("{}: {}", flag, e.what()));
    }
}

CLI::Option* add_json_flag(CLI::App& cmd, bool& json, const std::string& help) {
    return cmd.add_flag("--json", json, help)->envname("KILN_JSON");
}

namespace {

void collect(const CLI::App& app, const std::string& path, std::vector<FlagEnv>& out) {
    for (const CLI::Option* o : app.get_options()) {
        if (!o->nonpositional()) continue;
        const std::string name = o->get_name();
        if (name == "--help" || name == "--version") continue;
        out.push_back({path, name, o->get_envname()});
    }
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        collect(*sub, path + " " + sub->get_name(), out);
}

}  // namespace

std::vector<FlagEnv> flag_env_names(const CLI::App& app) {
    std::vector<FlagEnv> out;
    collect(app, "kiln", out);
    return out;
}

}  // namespace kiln::cli
