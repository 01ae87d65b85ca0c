// The length limits tokenization_kimi.py applies before handing text to tiktoken, reproduced exactly:
// the text is cut into chunks of at most 400,000 code points, and each chunk into slices so that no
// slice holds a run of more than 25,000 consecutive whitespace or non-whitespace code points
// (whitespace as Python's str.isspace). A run is cut after its 25,000th code point; the slice keeps
// whatever preceded the run. Each slice is then pre-tokenized and encoded on its own, so these cuts
// change tokens, which is why they are reproduced rather than replaced by a different bound.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace kiln::model {

inline constexpr size_t kimi_max_encode_chars = 400'000;
inline constexpr size_t kimi_max_run_chars = 25'000;

// `text` must be valid UTF-8. Returns the slices in order; their concatenation is `text`.
std::vector<std::string_view> split_for_encode(std::string_view text, size_t max_chars = kimi_max_encode_chars,
                                               size_t max_run = kimi_max_run_chars);

}  // namespace kiln::model
