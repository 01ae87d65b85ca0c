#include "model/tokenizer/tokenizer.hpp"

#include <array>
#include <unordered_map>

#include <fmt/format.h>

#include "model/tokenizer/bpe.hpp"
#include "model/tokenizer/chunking.hpp"
#include "model/tokenizer/model_vocab.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "model/tokenizer/utf8.hpp"

namespace kiln::model {

std::string join_segments(const ChatSegments& segments) {
    std::string out;
    for (const auto& s : segments) out += s.text;
    return out;
}

// A byte trie over the special-token names: finds the leftmost occurrence of any name (the longest
// one where several start at the same byte).
struct Tokenizer::SpecialMatcher {
    struct Node {
        std::vector<std::pair<unsigned char, uint32_t>> children;
        int64_t id = -1;
    };
    std::vector<Node> nodes{1};
    std::array<bool, 256> first{};
    std::unordered_map<std::string, uint32_t> by_name;

    void add(const std::string& name, uint32_t id) {
        by_name.emplace(name, id);
        first[static_cast<unsigned char>(name[0])] = true;
        uint32_t at = 0;
        for (char ch : name) {
            const auto c = static_cast<unsigned char>(ch);
            uint32_t child = 0;
            for (const auto& [k, v] : nodes[at].children)
                if (k == c) child = v;
            if (child == 0) {
                child = static_cast<uint32_t>(nodes.size());
                nodes[at].children.push_back({c, child});
                nodes.emplace_back();
            }
            at = child;
        }
        nodes[at].id = id;
    }

    // Leftmost match at or after `pos`: sets begin/len/id and returns true.
    bool find(std::string_view s, size_t pos, size_t& begin, size_t& len, uint32_t& id) const {
        for (size_t i = pos; i < s.size(); ++i) {
            if (!first[static_cast<unsigned char>(s[i])]) continue;
            uint32_t at = 0;
            int64_t best = -1;
            size_t best_len = 0;
            for (size_t j = i; j < s.size(); ++j) {
                const auto c = static_cast<unsigned char>(s[j]);
                uint32_t child = 0;
                for (const auto& [k, v] : nodes[at].children)
                    if (k == c) child = v;
                if (child == 0) break;
                at = child;
                if (nodes[at].id >= 0) {
                    best = nodes[at].id;
                    best_len = j + 1 - i;
                }
            }
            if (best >= 0) {
                begin = i;
                len = best_len;
                id = static_cast<uint32_t>(best);
                return true;
            }
        }
        return false;
    }
};

Tokenizer::Tokenizer(Vocabulary vocab) : n_mergeable_(static_cast<uint32_t>(vocab.mergeable.size())) {
    if (vocab.mergeable.empty()) throw TokenizerError("vocabulary has no mergeable tokens");
    {
        std::vector<std::string_view> views(vocab.mergeable.begin(), vocab.mergeable.end());
        ranks_ = ByteRankTable(views);
    }
    for (int b = 0; b < 256; ++b) {
        const char c = static_cast<char>(b);
        if (ranks_.find(std::string_view(&c, 1)) == ByteRankTable::missing) {
            throw TokenizerError(fmt::format("vocabulary lacks the single byte 0x{:02X}: byte-level BPE needs all 256", b));
        }
    }
    specials_ = std::move(vocab.specials);
    matcher_ = std::make_unique<SpecialMatcher>();
    for (uint32_t i = 0; i < specials_.size(); ++i) {
        if (specials_[i].empty()) throw TokenizerError(fmt::format("special token {} has an empty name", n_mergeable_ + i));
        utf8::validate(specials_[i], "special token name");
        if (matcher_->by_name.count(specials_[i])) {
            throw TokenizerError(fmt::format("special token '{}' is used for two ids", specials_[i]));
        }
        matcher_->add(specials_[i], n_mergeable_ + i);
    }
    pretokenizer_ = std::make_unique<PreTokenizer>();
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
    if (!std::filesystem::exists(dir / "config.json")) return Tokenizer(Vocabulary::load(dir));
    return load_model_tokenizer(dir, load_config(dir, ParseOptions{.quiet = true}));
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
    pretokenizer_->for_each_piece(text, [&](std::string_view piece) { byte_pair_encode(ranks_, piece, out); });
}

void Tokenizer::encode_into(std::string_view text, SpecialTokens mode, std::vector<uint32_t>& out) const {
    utf8::validate(text);
    for (std::string_view slice : split_for_encode(text)) {
        if (mode == SpecialTokens::text) {
            encode_ordinary(slice, out);
            continue;
        }
        size_t pos = 0, begin = 0, len = 0;
        uint32_t id = 0;
        while (matcher_->find(slice, pos, begin, len, id)) {
            encode_ordinary(slice.substr(pos, begin - pos), out);
            out.push_back(id);
            pos = begin + len;
        }
        encode_ordinary(slice.substr(pos), out);
    }
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, SpecialTokens mode) const {
    std::vector<uint32_t> out;
    out.reserve(text.size() / 3 + 4);
    encode_into(text, mode, out);
    return out;
}

std::vector<uint32_t> Tokenizer::encode_segments(const ChatSegments& segments) const {
    std::vector<uint32_t> out;
    for (const auto& s : segments) encode_into(s.text, s.control ? SpecialTokens::control : SpecialTokens::text, out);
    return out;
}

std::string_view Tokenizer::token_bytes(uint32_t id) const {
    if (id < n_mergeable_) return ranks_.bytes(id);
    if (id < vocab_size()) return specials_[id - n_mergeable_];
    throw TokenizerError(fmt::format("token id {} is out of range (the vocabulary has {} ids)", id, vocab_size()));
}

std::string Tokenizer::decode_bytes(std::span<const uint32_t> ids) const {
    std::string out;
    for (uint32_t id : ids) out += token_bytes(id);
    return out;
}

std::string Tokenizer::decode(std::span<const uint32_t> ids) const {
    return utf8::decode_lossy(decode_bytes(ids), true).text;
}

std::optional<uint32_t> Tokenizer::special_id(std::string_view name) const {
    const auto it = matcher_->by_name.find(std::string(name));
    if (it == matcher_->by_name.end()) return std::nullopt;
    return it->second;
}

uint32_t Tokenizer::require_special(std::string_view name) const {
    if (auto id = special_id(name)) return *id;
    throw TokenizerError(fmt::format("the vocabulary has no special token {}", name));
}

}  // namespace kiln::model
