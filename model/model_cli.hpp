// The model subcommands of `kiln`: `make-model` (random-weight checkpoints from a preset).
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::model {

void add_model_commands(CLI::App& app);

}  // namespace kiln::model
