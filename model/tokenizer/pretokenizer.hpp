// The Kimi pre-tokenizer: the regex from tokenization_kimi.py (`pat_str`) that cuts text into pieces
// before BPE, compiled with PCRE2 (UTF + UCP, JIT when available).
//
// PCRE2 has no class intersection, so fancy-regex's `[...&&[^\p{Han}]]` is rewritten as a negative
// lookahead `(?:(?!\p{Han})[...])`; `\s+(?!\S)` is kept as written. `\s`/`\S` are spelled out as the
// Unicode White_Space set, which is what `\s` means in the Rust regex engine tiktoken uses, and
// `\p{Han}` is pinned to the Script property (`sc:Han`), as the Rust engine reads a bare script name.
// Matching follows tiktoken's find_iter: leftmost-first, scanning forward.
#pragma once

#include <string>
#include <string_view>

namespace kiln::model {

// The pattern as tokenization_kimi.py writes it (fancy-regex syntax, for tiktoken).
const std::string& kimi_pattern_original();
// The same pattern rewritten for PCRE2.
const std::string& kimi_pattern_pcre2();

class PreTokenizer {
public:
    explicit PreTokenizer(const std::string& pcre2_pattern = kimi_pattern_pcre2());
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Calls fn(piece) for each match in `text` (valid UTF-8; not re-checked), in order. Thread-safe.
    template <typename Fn>
    void for_each_piece(std::string_view text, Fn&& fn) const {
        size_t pos = 0;
        size_t begin = 0, end = 0;
        while (pos < text.size() && next_match(text, pos, begin, end)) {
            fn(text.substr(begin, end - begin));
            pos = end;
        }
    }

    bool jit() const { return jit_; }

private:
    // Finds the first match at or after `pos`; false when there is none.
    bool next_match(std::string_view text, size_t pos, size_t& begin, size_t& end) const;

    void* code_ = nullptr;  // pcre2_code_8*
    bool jit_ = false;
};

}  // namespace kiln::model
