// Deterministic mixed-script text for training generated vocabularies and for tests/benchmarks:
// a small embedded sample (prose in several scripts, code) plus procedurally generated text built
// from a seeded PRNG (Latin, Vietnamese with tone marks, Cyrillic, Greek, Han, kana, Hangul,
// Devanagari, Arabic, digits, emoji incl. ZWJ sequences, code, mixed whitespace and CRLF).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::model {

// The embedded sample.
std::string_view embedded_corpus();

// About `bytes` bytes of generated text; the same (seed, bytes) always gives the same text.
std::string generate_corpus(uint64_t seed, size_t bytes);

}  // namespace kiln::model
