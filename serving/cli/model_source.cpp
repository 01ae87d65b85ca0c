#include "serving/cli/model_source.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "runtime/error.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tiny_vocab.hpp"
#endif

namespace kiln::cli {

using model::reference::ModelSource;

namespace {

void add_source_options(CLI::App& cmd, ModelSource& s, const char* model_help, const char* preset_help) {
    cmd.add_option("--model", s.model_dir, model_help)->envname("KILN_MODEL");
    cmd.add_option("--preset", s.preset, preset_help)->envname("KILN_PRESET");
}

}  // namespace

void add_reference_source_options(CLI::App& cmd, ModelSource& s) {
    add_source_options(cmd, s, "checkpoint directory (config.json + safetensors)",
                       "built-in random-weight model instead of a directory (k3-tiny)");
}

#if KILN_HAVE_TOKENIZER
void add_tokenizer_source_options(CLI::App& cmd, ModelSource& s) {
    add_source_options(cmd, s, "model directory holding tiktoken.model and tokenizer_config.json",
                       "built-in vocabulary instead of a model directory (k3-tiny)");
}

model::Tokenizer open_tokenizer(const ModelSource& s, bool default_tiny) {
    if (!s.model_dir.empty() && !s.preset.empty()) throw InvalidArgument("give either --model or --preset, not both");
    if (!s.model_dir.empty()) return model::Tokenizer::load(s.model_dir);
    if (s.preset == "k3-tiny" || (s.preset.empty() && default_tiny)) return model::make_tiny_tokenizer();
    if (s.preset.empty()) throw InvalidArgument("no vocabulary: give --model DIR or --preset k3-tiny");
    throw InvalidArgument(fmt::format("unknown preset '{}' (known: k3-tiny)", s.preset));
}
#endif

void write_stdout(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

}  // namespace kiln::cli
