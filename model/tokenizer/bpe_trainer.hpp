// Deterministic byte-level BPE training, used to generate vocabularies for tests and the k3-tiny
// preset (the real Kimi vocabulary is not needed to exercise the whole path).
//
// The corpus is cut into pieces by the Kimi pre-tokenizer; ranks 0..255 are the single bytes in
// byte order, then each step merges the most frequent adjacent pair (ties: the pair of lower ids)
// and appends the concatenation as the next rank. Pair counts are updated incrementally, so
// training cost follows the number of words a merge touches, not the corpus size.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::model {

// Returns exactly `num_tokens` tokens (bytes by rank; num_tokens >= 256). Throws TokenizerError if
// the corpus runs out of pairs first.
std::vector<std::string> train_bpe(std::string_view corpus, size_t num_tokens);

}  // namespace kiln::model
