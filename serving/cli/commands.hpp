// The `kiln` commands, one file each in serving/cli/: each adds its subcommand(s) to the app.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cli {

void add_info_command(CLI::App& app);        // info.cpp
void add_cache_command(CLI::App& app);       // cache.cpp: cache ls/show/stats/verify/prune/clear/export/import/keygen
void add_jit_command(CLI::App& app);         // jit.cpp: jit families/compile
void add_make_model_command(CLI::App& app);  // make_model.cpp
void add_generate_command(CLI::App& app);    // generate.cpp
void add_tokenize_commands(CLI::App& app);   // tokenize.cpp: tokenize, detokenize (builds with the tokenizer)
void add_bench_command(CLI::App& app);       // bench.cpp: bench reference/tokenizer/cache/jit/host/moe
void add_serve_command(CLI::App& app);       // serve.cpp (builds with the HTTP server)
void add_tune_command(CLI::App& app);        // tune.cpp: tune, tune show
void add_cache_build_command(CLI::App& cache);  // cache_build.cpp: cache build (a subcommand of `cache`)

}  // namespace kiln::cli
