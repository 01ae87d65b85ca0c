// A vocabulary checked against the model it tokenizes for. A Kimi vocabulary is N mergeable tokens followed
// by 256 special ids, so a tiktoken.model with lines missing (or added) silently renumbers every special
// token; the model's config.json pins both the size (vocab_size) and the special ids it names.
#pragma once

#include <filesystem>
#include <string_view>

#include "model/config.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace kiln::model {

// Throws TokenizerError naming both sources when `tok` cannot be the vocabulary of `c`: its size differs
// from vocab_size, or bos_token_id / eos_token_id / pad_token_id is not one of its special ids.
void check_vocabulary(const Tokenizer& tok, const ModelConfig& c, std::string_view vocab_source,
                      std::string_view config_source);

// Tokenizer::load(dir), checked against `c` (the model's config, already parsed from dir/config.json).
Tokenizer load_model_tokenizer(const std::filesystem::path& dir, const ModelConfig& c);

}  // namespace kiln::model
