// Flags shared by the commands, and the rules every kiln flag follows: it has a KILN_* environment
// variable (documented in README.md), the command line wins over it, and a number is checked against
// its range before it is stored, so nothing narrows or wraps.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kiln::cli {

// A check for a numeric option (and its environment variable): the text must be a decimal integer
// (for integral T) or a finite number (floating T) within [lo, hi]. Integers are rewritten in plain
// decimal before CLI11 converts them, so "010" is ten (not octal eight) and "-1" never wraps into an
// unsigned field. On failure the error reads "--flag: 257 is out of range [0, 32]". Attach it with
// Option::transform (Option::check would discard the rewrite): `->transform(in_range(0, 32))`.
CLI::Validator integer_range(long double lo, long double hi);
CLI::Validator real_range(long double lo, long double hi);

template <std::integral T>
CLI::Validator in_range(T lo, T hi) {
    return integer_range(static_cast<long double>(lo), static_cast<long double>(hi));
}
template <std::floating_point T>
CLI::Validator in_range(T lo, T hi) {
    return real_range(static_cast<long double>(lo), static_cast<long double>(hi));
}

// A size flag's value ("512M", "2G", "1.5GiB", bytes); InvalidArgument naming the flag on junk.
uint64_t parse_size_flag(const char* flag, const std::string& text);

// --json (KILN_JSON): machine-readable output.
CLI::Option* add_json_flag(CLI::App& cmd, bool& json, const std::string& help);

// Every flag of `app` and of its subcommands, depth first, with its environment variable ("" for
// none). Positional arguments, --help and --version are left out.
struct FlagEnv {
    std::string command;  // "kiln cache ls"
    std::string flag;     // "--json"
    std::string env;      // "KILN_JSON"
};
std::vector<FlagEnv> flag_env_names(const CLI::App& app);

}  // namespace kiln::cli
