// The generated vocabulary of the `k3-tiny` preset: byte-level BPE trained deterministically at run
// time on training_corpus.hpp's text, 3,840 mergeable tokens (ids 0..3839) followed by the 256
// special ids (3840..4095) carrying K3's names at the same offsets as in the real vocabulary
// (163584 + i <-> 3840 + i), so the whole tokenizer/chat path runs without the 163k-token file.
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/tokenizer/special_tokens.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/vocabulary.hpp"

namespace kiln::model {

inline constexpr uint32_t tiny_num_mergeable = 3840;
inline constexpr uint32_t tiny_vocab_size = tiny_num_mergeable + num_reserved_special;  // 4096

// The tiny vocabulary with `names` on its special ids (K3's by default; K2's for K2-template tests).
// Trained once per process per name table (about a second), then copied.
Vocabulary make_tiny_vocabulary(const SpecialNameTable& names = k3_special_names());

// A tokenizer over the tiny vocabulary, built in memory.
Tokenizer make_tiny_tokenizer(const SpecialNameTable& names = k3_special_names());

// Writes dir/tiktoken.model and dir/tokenizer_config.json for the tiny vocabulary (creating dir),
// each atomically; Tokenizer::load(dir) then reads back the same tokenizer.
void write_tiny_vocab(const std::filesystem::path& dir);

}  // namespace kiln::model
