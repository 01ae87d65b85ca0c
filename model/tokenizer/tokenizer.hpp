// The Kimi tokenizer: tiktoken-compatible byte-level BPE with the Kimi pre-tokenizer and
// tokenization_kimi.py's length limits (see chunking.hpp).
//
// encode(text, SpecialTokens::text) treats everything as plain text (tiktoken's
// disallowed_special=()); SpecialTokens::control also recognises the vocabulary's special-token
// strings (allowed_special="all"), which only control segments of a rendered chat should use.
// Input must be valid UTF-8: invalid bytes raise TokenizerError naming the offset (a Python str,
// which is what the reference encodes, cannot hold them). No BOS/EOS is added.
// decode() turns ill-formed UTF-8 into U+FFFD per maximal subpart (Python's errors="replace");
// decode_bytes() returns the raw bytes. Thread-safe after construction.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/byte_rank_table.hpp"
#include "model/tokenizer/chat_segment.hpp"
#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/vocabulary.hpp"

namespace kiln::model {

enum class SpecialTokens { text, control };

class Tokenizer {
public:
    explicit Tokenizer(Vocabulary vocab);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    // Loads a model directory (tiktoken.model + tokenizer_config.json). When the directory holds a
    // config.json, the vocabulary is checked against it (model_vocab.hpp).
    static Tokenizer load(const std::filesystem::path& dir);

    std::vector<uint32_t> encode(std::string_view text, SpecialTokens mode) const;
    void encode_into(std::string_view text, SpecialTokens mode, std::vector<uint32_t>& out) const;
    // Each segment encoded on its own (control segments with SpecialTokens::control), concatenated.
    std::vector<uint32_t> encode_segments(const ChatSegments& segments) const;

    std::string decode_bytes(std::span<const uint32_t> ids) const;
    std::string decode(std::span<const uint32_t> ids) const;

    uint32_t vocab_size() const { return n_mergeable_ + static_cast<uint32_t>(specials_.size()); }
    uint32_t num_mergeable() const { return n_mergeable_; }
    bool is_special(uint32_t id) const { return id >= n_mergeable_ && id < vocab_size(); }
    // Bytes of a token (a special token's name for special ids). Throws on an unknown id.
    std::string_view token_bytes(uint32_t id) const;
    std::optional<uint32_t> special_id(std::string_view name) const;
    // Like special_id, but throws TokenizerError naming the token when the vocabulary lacks it.
    uint32_t require_special(std::string_view name) const;
    const std::vector<std::string>& special_names() const { return specials_; }
    const ByteRankTable& ranks() const { return ranks_; }
    bool jit() const { return pretokenizer_->jit(); }

private:
    struct SpecialMatcher;
    void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const;

    uint32_t n_mergeable_ = 0;
    ByteRankTable ranks_;
    std::vector<std::string> specials_;
    std::unique_ptr<SpecialMatcher> matcher_;
    std::unique_ptr<PreTokenizer> pretokenizer_;
};

}  // namespace kiln::model
