#include "cache/content_key.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::cache {

std::string ContentKey::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

ContentKey ContentKey::parse(std::string_view hex) {
    auto bad = [&] { return InvalidArgument(fmt::format("'{}' is not a cache key (expected 32 hex digits)", hex)); };
    if (hex.size() != 32) throw bad();
    ContentKey k;
    for (size_t i = 0; i < 32; ++i) {
        char c = hex[i];
        uint64_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else throw bad();
        uint64_t& w = i < 16 ? k.hi : k.lo;
        w = (w << 4) | d;
    }
    return k;
}

KeyBuilder::KeyBuilder() : state_(XXH3_createState()) {
    XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
    field("kiln-key-schema", static_cast<int64_t>(k_key_schema_version));
}

KeyBuilder::~KeyBuilder() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void KeyBuilder::update(const void* p, size_t n) { XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), p, n); }

// Each field: u64 label length, label, u64 value length, value (little-endian lengths).
KeyBuilder& KeyBuilder::field(std::string_view label, std::string_view bytes) {
    uint64_t n = label.size();
    update(&n, sizeof n);
    update(label.data(), label.size());
    n = bytes.size();
    update(&n, sizeof n);
    update(bytes.data(), bytes.size());
    return *this;
}

KeyBuilder& KeyBuilder::field(std::string_view label, int64_t value) {
    return field(label, fmt::format("{}", value));
}

ContentKey KeyBuilder::finish() const {
    XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
    return ContentKey{h.high64, h.low64};
}

}  // namespace kiln::cache
