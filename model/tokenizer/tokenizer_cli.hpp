// `kiln tokenize`, `kiln detokenize` and `kiln bench tokenizer`.
//
//   kiln tokenize [--model DIR | --preset k3-tiny] [--special] TEXT   ids separated by spaces
//   kiln detokenize [--model DIR | --preset k3-tiny] ID...            the decoded text
//   kiln bench tokenizer [--model DIR | --preset k3-tiny] [--mb N]     encode/decode throughput
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::model {

void add_tokenizer_commands(CLI::App& app);
// Adds `tokenizer` under the `bench` subcommand.
void add_tokenizer_bench_commands(CLI::App& bench);

}  // namespace kiln::model
