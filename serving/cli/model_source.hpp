// --model / --preset (KILN_MODEL / KILN_PRESET), shared by the commands that run a model or its
// tokenizer, and what they open; plus unbuffered writes to stdout for streamed output.
#pragma once

#include <string_view>

#include <CLI/CLI.hpp>

#include "kiln_config.h"
#include "model/reference/loaded_model.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tokenizer.hpp"
#endif

namespace kiln::cli {

// For `generate` and `bench reference`: a checkpoint directory, or a preset.
void add_reference_source_options(CLI::App& cmd, model::reference::ModelSource& source);

#if KILN_HAVE_TOKENIZER
// For `tokenize`, `detokenize` and `bench tokenizer`: a directory with tiktoken.model, or k3-tiny.
void add_tokenizer_source_options(CLI::App& cmd, model::reference::ModelSource& source);

// The directory's tokenizer, or the k3-tiny vocabulary for --preset k3-tiny (and for no source at all
// when `default_tiny`). InvalidArgument for both or neither, or an unknown preset.
model::Tokenizer open_tokenizer(const model::reference::ModelSource& source, bool default_tiny);
#endif

// Writes and flushes at once (streamed tokens appear as they come).
void write_stdout(std::string_view s);

}  // namespace kiln::cli
