#include "model/tokenizer/model_vocab.hpp"

#include <fmt/format.h>

#include "model/tokenizer/tokenizer_error.hpp"

namespace kiln::model {

void check_vocabulary(const Tokenizer& tok, const ModelConfig& c, std::string_view vocab_source,
                      std::string_view config_source) {
    const uint32_t n = tok.num_mergeable(), size = tok.vocab_size();
    if (int64_t(size) != int64_t(c.vocab_size)) {
        throw TokenizerError(fmt::format(
            "{} has {} tokens, so the vocabulary has {} ids ({} special ids from {}), but {} says vocab_size {} "
            "(a truncated or foreign tiktoken.model renumbers the special tokens)",
            vocab_source, n, size, size - n, n, config_source, c.vocab_size));
    }
    auto check_id = [&](int64_t id, const char* field) {
        if (id >= 0 && id < int64_t(size) && tok.is_special(uint32_t(id))) return;
        throw TokenizerError(fmt::format("{}: {} {} is not a special token of {} (its special ids are {}..{})",
                                         config_source, field, id, vocab_source, n, size - 1));
    };
    if (c.bos_token_id) check_id(*c.bos_token_id, "bos_token_id");
    for (int64_t id : c.eos_token_ids) check_id(id, "eos_token_id");
    if (c.pad_token_id) check_id(*c.pad_token_id, "pad_token_id");
}

Tokenizer load_model_tokenizer(const std::filesystem::path& dir, const ModelConfig& c) {
    Tokenizer tok(Vocabulary::load(dir));
    check_vocabulary(tok, c, (dir / "tiktoken.model").string(), (dir / "config.json").string());
    return tok;
}

}  // namespace kiln::model
