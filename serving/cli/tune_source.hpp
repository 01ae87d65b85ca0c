// What `kiln tune` and `kiln cache build` share: the model whose shapes they cover (--model DIR or --preset
// P, with KILN_MODEL / KILN_PRESET), --max-tokens and --ep-size, and the tune DB's tables as text.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "autotune/tune_db.hpp"
#include "model/config.hpp"

namespace kiln::cli {

struct TuneModelFlags {
    std::string model_dir, preset;
    int max_tokens = 0;  // 0: the command's default
    int ep_size = 1;
};

// Adds --model, --preset, --max-tokens (KILN_MAX_TOKENS, 1..1048576) and --ep-size (KILN_EP_SIZE, 1..64).
void add_tune_model_flags(CLI::App& cmd, TuneModelFlags& f, const std::string& max_tokens_help);

// The config of --model or --preset; InvalidArgument for both or neither.
model::ModelConfig tune_model_config(const TuneModelFlags& f);

// Everything a tune DB holds, as JSON (what `kiln tune show --json` prints and the plot script reads).
nlohmann::json tune_db_json(const autotune::TuneDb& db);

}  // namespace kiln::cli
