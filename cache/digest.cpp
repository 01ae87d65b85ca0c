#include "cache/digest.hpp"

#include <openssl/evp.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include "cache/cache_error.hpp"

namespace kiln::cache {

std::string sha256_hex(std::span<const uint8_t> bytes) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1)
        throw CacheError("SHA-256 failed (OpenSSL EVP_Digest)");
    return to_hex({md, len});
}

std::string sha256_hex(std::string_view bytes) {
    return sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string xxh3_128_hex(std::span<const uint8_t> bytes) {
    XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

std::string to_hex(std::span<const uint8_t> bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string out(bytes.size() * 2, '0');
    for (size_t i = 0; i < bytes.size(); ++i) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    return out;
}

std::string from_hex(std::string_view hex) {
    auto nibble = [&](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        throw InvalidArgument(fmt::format("'{}' is not hex", hex));
    };
    if (hex.size() % 2 != 0) throw InvalidArgument(fmt::format("'{}' is not hex (odd length)", hex));
    std::string out(hex.size() / 2, '\0');
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<char>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
    return out;
}

}  // namespace kiln::cache
