#include "model/tokenizer/vocabulary.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/tokenizer/special_tokens.hpp"
#include "model/tokenizer/tiktoken_file.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/log.hpp"

namespace kiln::model {

Vocabulary Vocabulary::load(const std::filesystem::path& dir) {
    if (!std::filesystem::is_directory(dir)) {
        throw kiln::NotFound(fmt::format("model directory {} does not exist", dir.string()));
    }
    const auto model_file = dir / "tiktoken.model";
    if (!std::filesystem::exists(model_file)) {
        throw kiln::NotFound(fmt::format("{} has no tiktoken.model", dir.string()));
    }
    Vocabulary v;
    v.mergeable = read_tiktoken_file(model_file);
    const auto n = static_cast<uint32_t>(v.mergeable.size());
    const auto config_file = dir / "tokenizer_config.json";
    if (std::filesystem::exists(config_file)) {
        std::ifstream in(config_file, std::ios::binary);
        if (!in) throw kiln::IoError(fmt::format("cannot open {}", config_file.string()));
        std::stringstream ss;
        ss << in.rdbuf();
        nlohmann::json config;
        try {
            config = nlohmann::json::parse(ss.str());
        } catch (const nlohmann::json::exception& e) {
            throw TokenizerError(fmt::format("{}: not valid JSON: {}", config_file.string(), e.what()));
        }
        v.specials = special_names_from_config(config, n, config_file.string());
        // A tiktoken.model with missing or extra lines moves the special ids; the names must still land on them.
        for (const auto& [id, content] : added_tokens(config, config_file.string())) {
            if (id >= n && id < n + num_reserved_special) continue;
            throw TokenizerError(fmt::format(
                "{}: added_tokens_decoder names token {} '{}', but {} has {} tokens, so the special ids are {}..{} "
                "(is tiktoken.model truncated or from another model?)",
                config_file.string(), id, content, model_file.string(), n, n, n + num_reserved_special - 1));
        }
    } else {
        log::warn("{} has no tokenizer_config.json; using the K3 special-token names", dir.string());
        v.specials = special_names_from_table(k3_special_names(), n);
    }
    return v;
}

void Vocabulary::write_tiktoken(const std::filesystem::path& dir) const {
    write_file_atomic(dir / "tiktoken.model", format_tiktoken(mergeable));
}

}  // namespace kiln::model
