#include "model/tokenizer/utf8.hpp"

#include <fmt/format.h>

#include "model/tokenizer/tokenizer_error.hpp"

namespace kiln::model::utf8 {

namespace {

// Length of the well-formed sequence starting at s[i], 0 if ill-formed. On ill-formed input,
// `subpart` receives the length of the maximal subpart (>= 1); `truncated` is set when the
// sequence was a valid prefix cut off by the end of `s`.
size_t scan(std::string_view s, size_t i, size_t& subpart, bool& truncated) {
    truncated = false;
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        subpart = 1;
        return 0;
    }
    for (size_t k = 1; k < need; ++k) {
        if (i + k >= s.size()) {
            subpart = k;
            truncated = true;
            return 0;
        }
        const auto b = static_cast<unsigned char>(s[i + k]);
        const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            subpart = k;
            return 0;
        }
    }
    return need;
}

}  // namespace

size_t find_invalid(std::string_view s) {
    size_t i = 0;
    const size_t n = s.size();
    while (i < n) {
        // Fast path over ASCII.
        while (i < n && static_cast<unsigned char>(s[i]) < 0x80) ++i;
        if (i >= n) break;
        size_t subpart = 0;
        bool truncated = false;
        const size_t len = scan(s, i, subpart, truncated);
        if (len == 0) return i;
        i += len;
    }
    return npos;
}

void validate(std::string_view s, std::string_view what) {
    const size_t bad = find_invalid(s);
    if (bad != npos) {
        throw TokenizerError(fmt::format("{} is not valid UTF-8: ill-formed byte 0x{:02X} at byte offset {}",
                                         what, static_cast<unsigned char>(s[bad]), bad));
    }
}

void append(std::string& out, char32_t c) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

size_t length(std::string_view s) {
    size_t n = 0;
    for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    return n;
}

std::string_view python_strip(std::string_view s) {
    size_t begin = 0;
    while (begin < s.size()) {
        size_t p = begin;
        if (!python_isspace(next(s, p))) break;
        begin = p;
    }
    size_t end = s.size();
    while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t p = start;
        if (!python_isspace(next(s, p))) break;
        end = start;
    }
    return s.substr(begin, end - begin);
}

Decoded decode_lossy(std::string_view bytes, bool final_chunk) {
    Decoded d;
    d.text.reserve(bytes.size());
    size_t i = 0;
    const size_t n = bytes.size();
    while (i < n) {
        const size_t run = i;
        while (i < n && static_cast<unsigned char>(bytes[i]) < 0x80) ++i;
        d.text.append(bytes.data() + run, i - run);
        if (i >= n) break;
        size_t subpart = 0;
        bool truncated = false;
        const size_t len = scan(bytes, i, subpart, truncated);
        if (len > 0) {
            d.text.append(bytes.data() + i, len);
            i += len;
            continue;
        }
        if (truncated && !final_chunk) break;  // wait for the rest of the character
        append(d.text, replacement);
        i += subpart;
    }
    d.consumed = i;
    return d;
}

}  // namespace kiln::model::utf8
