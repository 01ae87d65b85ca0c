// The kiln command line: one CLI11 app with the global flags (--version, --target) and every command.
// run() parses argv, runs the chosen command and turns what it throws into the one error format
// (serving/cli/errors.hpp); it returns the exit status.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cli {

// Adds the global flags and every command to `app`.
void add_commands(CLI::App& app);

int run(int argc, char** argv);

}  // namespace kiln::cli
