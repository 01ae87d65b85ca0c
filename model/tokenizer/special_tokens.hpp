// Names of the 256 reserved special ids that follow the mergeable ranks (ids N..N+255; N = 163,584
// in the real Kimi vocabulary). Named ids come from tokenizer_config.json's `added_tokens_decoder`;
// every other reserved id is `<|reserved_token_{id}|>`, as tokenization_kimi.py does.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::model {

inline constexpr uint32_t num_reserved_special = 256;
inline constexpr uint32_t kimi_num_mergeable = 163'584;

// Named entries as (offset from the first special id, name).
using SpecialNameTable = std::vector<std::pair<uint32_t, std::string>>;

// K3's names (<|end_of_msg|>, <|open|>, <|close|>, <|sep|>, ...), as its tokenizer_config.json has them.
const SpecialNameTable& k3_special_names();
// K2.5 / Kimi-Linear names (<|im_end|>, <|im_user|>, ..., tool-call markers, media, <think>).
const SpecialNameTable& k2_special_names();

// The 256 names for ids n_mergeable..n_mergeable+255: the table's names, `<|reserved_token_{id}|>` elsewhere.
std::vector<std::string> special_names_from_table(const SpecialNameTable& table, uint32_t n_mergeable);

// The entries of a parsed tokenizer_config.json's `added_tokens_decoder` ({"163586": {"content": ...}}) as
// (id, content), in id order. Throws TokenizerError naming `source` on a key that is not a decimal id or
// an entry without a non-empty string "content".
std::vector<std::pair<uint64_t, std::string>> added_tokens(const nlohmann::json& config, const std::string& source);

// Same, from a parsed tokenizer_config.json (`added_tokens_decoder`: {"163586": {"content": ...}}).
// Entries outside the reserved range are ignored (as tokenization_kimi.py does). Throws
// TokenizerError on malformed entries or two ids with one name; `source` names the file in errors.
std::vector<std::string> special_names_from_config(const nlohmann::json& config, uint32_t n_mergeable,
                                                   const std::string& source);

// A tokenizer_config.json for a vocabulary with these names (what write_tiny_vocab writes).
nlohmann::json make_tokenizer_config(const SpecialNameTable& table, uint32_t n_mergeable);

}  // namespace kiln::model
