// UTF-8 helpers for the tokenizer: validation, code point iteration, Python's str.isspace, and
// decoding of arbitrary bytes with U+FFFD replacement.
//
// Replacement policy (used by Tokenizer::decode and StreamDecoder): every maximal subpart of an
// ill-formed sequence becomes one U+FFFD (Unicode §3.9 "best practice"), which is what Python's
// bytes.decode("utf-8", "replace") -- and so tiktoken's decode -- produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::model::utf8 {

inline constexpr size_t npos = static_cast<size_t>(-1);
inline constexpr char32_t replacement = 0xFFFD;

// Byte offset of the first ill-formed sequence in `s`, or npos when `s` is valid UTF-8.
size_t find_invalid(std::string_view s);

// Throws TokenizerError naming the byte offset of the first ill-formed sequence.
void validate(std::string_view s, std::string_view what = "text");

// Decodes the code point at s[pos] (s must be valid UTF-8) and advances pos past it.
inline char32_t next(std::string_view s, size_t& pos) {
    const auto b0 = static_cast<unsigned char>(s[pos]);
    if (b0 < 0x80) {
        ++pos;
        return b0;
    }
    if (b0 < 0xE0) {
        char32_t c = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[pos + 1]) & 0x3Fu);
        pos += 2;
        return c;
    }
    if (b0 < 0xF0) {
        char32_t c = ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[pos + 1]) & 0x3Fu) << 6) |
                     (static_cast<unsigned char>(s[pos + 2]) & 0x3Fu);
        pos += 3;
        return c;
    }
    char32_t c = ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[pos + 1]) & 0x3Fu) << 12) |
                 ((static_cast<unsigned char>(s[pos + 2]) & 0x3Fu) << 6) |
                 (static_cast<unsigned char>(s[pos + 3]) & 0x3Fu);
    pos += 4;
    return c;
}

void append(std::string& out, char32_t cp);

// Number of code points in valid UTF-8 `s`.
size_t length(std::string_view s);

// Python's str.isspace() for one code point (Unicode 14 data, the same set as CPython 3.11):
// bidi class WS/B/S or category Zs. Note it includes U+001C..U+001F, which \s does not.
inline bool python_isspace(char32_t c) {
    if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C);
    if (c < 0x85) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.strip(): removes python_isspace code points from both ends of valid UTF-8.
std::string_view python_strip(std::string_view s);

// Result of scanning arbitrary bytes: how many leading bytes can be emitted now, and the text.
struct Decoded {
    std::string text;     // valid UTF-8, ill-formed subparts replaced by U+FFFD
    size_t consumed = 0;  // bytes of the input represented in `text`
};

// Decodes `bytes`, replacing ill-formed subparts. With `final_chunk` false, a trailing sequence that
// is an incomplete but so far valid prefix is left unconsumed (it may complete with more bytes);
// with `final_chunk` true it becomes one U+FFFD.
Decoded decode_lossy(std::string_view bytes, bool final_chunk);

}  // namespace kiln::model::utf8
