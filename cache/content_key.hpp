// Content keys: XXH3-128 over length-prefixed, labelled fields. Two inputs that differ in any
// field (or in how bytes are split between fields) get different keys. Callers never put
// absolute paths in a key: only bytes that decide the artifact (source, headers, options,
// compiler identity, target).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cache {

// Bumped whenever the set or order of fields hashed into kernel keys changes.
inline constexpr uint32_t k_key_schema_version = 1;

struct ContentKey {
    uint64_t hi = 0;
    uint64_t lo = 0;

    std::string hex() const;  // 32 lowercase hex digits
    // Accepts the 32-digit form; throws InvalidArgument otherwise.
    static ContentKey parse(std::string_view hex);

    friend bool operator==(const ContentKey&, const ContentKey&) = default;
    friend auto operator<=>(const ContentKey&, const ContentKey&) = default;
};

class KeyBuilder {
public:
    KeyBuilder();
    ~KeyBuilder();
    KeyBuilder(const KeyBuilder&) = delete;
    KeyBuilder& operator=(const KeyBuilder&) = delete;

    KeyBuilder& field(std::string_view label, std::string_view bytes);
    KeyBuilder& field(std::string_view label, int64_t value);
    ContentKey finish() const;

private:
    void update(const void* p, size_t n);
    void* state_;
};

struct ContentKeyHash {
    size_t operator()(const ContentKey& k) const noexcept { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)); }
};

}  // namespace kiln::cache
