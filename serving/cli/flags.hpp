// Flags shared by the commands, and the rule every kiln flag follows: it has a KILN_* environment
// variable (documented in README.md), and the command line wins over it.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kiln::cli {

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
