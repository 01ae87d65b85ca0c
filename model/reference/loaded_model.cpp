#include "model/reference/loaded_model.hpp"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "model/checkpoint.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/temp_dir.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tiny_vocab.hpp"
#endif

namespace kiln::model::reference {

LoadedModel load_model(const ModelSource& s, [[maybe_unused]] bool with_tokenizer) {
    if (!s.model_dir.empty() && !s.preset.empty()) throw InvalidArgument("give either --model or --preset, not both");
    using clock = std::chrono::steady_clock;
    LoadedModel out;
    auto t0 = clock::now();
    if (!s.model_dir.empty()) {
        out.name = s.model_dir;
        ModelFiles files = open_model(s.model_dir);
        out.model = std::make_unique<ReferenceModel>(files.config, files.checkpoint);
#if KILN_HAVE_TOKENIZER
        const bool has_vocab = std::filesystem::exists(std::filesystem::path(s.model_dir) / "tiktoken.model");
        if (with_tokenizer && has_vocab) {
            out.tokenizer = Tokenizer::load(s.model_dir);
        } else if (with_tokenizer && uint32_t(files.config.vocab_size) == tiny_vocab_size) {
            log::info("{}: no tiktoken.model; using the k3-tiny vocabulary", s.model_dir);
            out.tokenizer = make_tiny_tokenizer();
        }
#endif
    } else {
        std::string preset = s.preset.empty() ? "k3-tiny" : s.preset;
        if (preset != "k3-tiny")
            throw InvalidArgument(fmt::format("preset '{}' is too large for the fp32 reference path; use k3-tiny", preset));
        out.name = preset;
        ModelConfig c = preset_config(preset);
        TempDir dir("kiln-preset");
        write_model(c, dir.path() / "model");
        Checkpoint ck = Checkpoint::open(dir.path() / "model");
        out.model = std::make_unique<ReferenceModel>(c, ck);
#if KILN_HAVE_TOKENIZER
        if (with_tokenizer) out.tokenizer = make_tiny_tokenizer();
#endif
    }
    out.load_seconds = std::chrono::duration<double>(clock::now() - t0).count();
    return out;
}

}  // namespace kiln::model::reference
