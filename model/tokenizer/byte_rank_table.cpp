#include "model/tokenizer/byte_rank_table.hpp"

#include <bit>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "model/tokenizer/tokenizer_error.hpp"

namespace kiln::model {

ByteRankTable::ByteRankTable(const std::vector<std::string_view>& tokens) {
    size_t total = 0;
    for (auto t : tokens) total += t.size();
    arena_.reserve(total);
    offsets_.reserve(tokens.size() + 1);
    offsets_.push_back(0);
    for (auto t : tokens) {
        arena_.append(t);
        offsets_.push_back(static_cast<uint32_t>(arena_.size()));
    }
    // Load factor <= 0.5 keeps probe chains short.
    const uint64_t cap = std::bit_ceil<uint64_t>(std::max<uint64_t>(16, tokens.size() * 2));
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (uint32_t r = 0; r < tokens.size(); ++r) {
        const std::string_view key = bytes(r);
        const uint64_t h = XXH3_64bits(key.data(), key.size());
        for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.rank == missing) {
                s.hash = h;
                s.rank = r;
                if (key.size() == 1) single_[static_cast<unsigned char>(key[0])] = r;
                if (key.size() == 2) {
                    pair_[(static_cast<unsigned char>(key[0]) << 8) | static_cast<unsigned char>(key[1])] = r;
                }
                break;
            }
            if (s.hash == h && bytes(s.rank) == key) {
                throw TokenizerError("duplicate token bytes in vocabulary");
            }
        }
    }
}

uint32_t ByteRankTable::find_hashed(std::string_view key) const {
    if (slots_.empty()) return missing;
    const uint64_t h = XXH3_64bits(key.data(), key.size());
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.rank == missing) return missing;
        if (s.hash == h) {
            const uint32_t a = offsets_[s.rank], b = offsets_[s.rank + 1];
            if (b - a == key.size() && std::memcmp(arena_.data() + a, key.data(), key.size()) == 0) return s.rank;
        }
    }
}

}  // namespace kiln::model
