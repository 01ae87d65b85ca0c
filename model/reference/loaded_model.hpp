// A reference model ready to run, from a checkpoint directory or a built-in preset (what `kiln
// generate` and `kiln bench reference` run on). Without a directory, k3-tiny is written to a temporary
// directory with the fixed make-model seed and loaded from there; only k3-tiny fits the fp32 path.
// The tokenizer is the directory's tiktoken.model, or the k3-tiny vocabulary for k3-tiny (and for a
// directory without tiktoken.model whose vocab_size is k3-tiny's).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kiln_config.h"
#include "model/reference/forward.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tokenizer.hpp"
#endif

namespace kiln::model::reference {

struct ModelSource {
    std::string model_dir;  // a checkpoint directory (config.json + safetensors)
    std::string preset;     // a built-in random-weight model; both empty = k3-tiny
};

struct LoadedModel {
    std::string name;  // the directory or the preset
    std::unique_ptr<ReferenceModel> model;
#if KILN_HAVE_TOKENIZER
    std::optional<Tokenizer> tokenizer;  // empty when not asked for, or none found
#endif
    double load_seconds = 0;
};

// Throws InvalidArgument for both a directory and a preset, or a preset too large for the fp32 path;
// CheckpointError / ConfigError for a bad directory.
LoadedModel load_model(const ModelSource& source, bool with_tokenizer);

}  // namespace kiln::model::reference
