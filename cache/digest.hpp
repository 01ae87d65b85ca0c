// Digests of artifact blobs: SHA-256 (OpenSSL EVP) and XXH3-128, as lowercase hex.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::cache {

std::string sha256_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view bytes);

// XXH3-128 as 32 hex digits: the fast integrity check of user-layer blobs.
std::string xxh3_128_hex(std::span<const uint8_t> bytes);

std::string to_hex(std::span<const uint8_t> bytes);
// Throws InvalidArgument on odd length or a non-hex digit.
std::string from_hex(std::string_view hex);

}  // namespace kiln::cache
