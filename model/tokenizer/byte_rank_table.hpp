// An immutable hash table from byte strings to token ranks: the lookup at the heart of byte-level
// BPE (every candidate merge is a lookup of the concatenated bytes). Open addressing over one byte
// arena; keys are hashed with XXH3.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::model {

class ByteRankTable {
public:
    static constexpr uint32_t missing = UINT32_MAX;

    ByteRankTable() = default;
    // tokens[r] holds the bytes of rank r. Byte strings must be distinct.
    explicit ByteRankTable(const std::vector<std::string_view>& tokens);

    // Rank of `bytes`, or `missing`.
    uint32_t find(std::string_view bytes) const {
        // One- and two-byte keys (every first BPE step) use direct tables instead of hashing.
        if (bytes.size() == 2) {
            return pair_[(static_cast<unsigned char>(bytes[0]) << 8) | static_cast<unsigned char>(bytes[1])];
        }
        if (bytes.size() == 1) return single_[static_cast<unsigned char>(bytes[0])];
        return find_hashed(bytes);
    }
    size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
    std::string_view bytes(uint32_t rank) const {
        return {arena_.data() + offsets_[rank], offsets_[rank + 1] - offsets_[rank]};
    }

private:
    uint32_t find_hashed(std::string_view bytes) const;

    struct Slot {
        uint64_t hash = 0;
        uint32_t rank = missing;
    };
    std::string arena_;
    std::vector<uint32_t> offsets_;  // size()+1 entries
    std::vector<Slot> slots_;
    uint64_t mask_ = 0;
    std::vector<uint32_t> single_ = std::vector<uint32_t>(256, missing);
    std::vector<uint32_t> pair_ = std::vector<uint32_t>(65536, missing);
};

}  // namespace kiln::model
