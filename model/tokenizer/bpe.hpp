// Byte-level BPE over one pre-tokenized piece, with tiktoken's semantics: start from single bytes and
// repeatedly merge the adjacent pair whose concatenated bytes have the lowest rank (the leftmost pair
// on ties) until no adjacent pair is a token. A piece that is itself a token is looked up directly.
//
// Short pieces use a flat vector scan (cache friendly); pieces longer than `heap_threshold` bytes use a
// binary heap over a linked list, O(n log n), so long pieces are never quadratic.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/byte_rank_table.hpp"

namespace kiln::model {

inline constexpr size_t bpe_heap_threshold = 128;

// Appends the ranks of `piece` to `out`. Every single byte must be a token of `ranks`.
void byte_pair_encode(const ByteRankTable& ranks, std::string_view piece, std::vector<uint32_t>& out);

// The two strategies, exposed for tests that check they agree.
void byte_pair_encode_scan(const ByteRankTable& ranks, std::string_view piece, std::vector<uint32_t>& out);
void byte_pair_encode_heap(const ByteRankTable& ranks, std::string_view piece, std::vector<uint32_t>& out);

}  // namespace kiln::model
