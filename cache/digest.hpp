// SHA-256 (OpenSSL EVP) of artifact blobs and manifests, as lowercase hex.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::cache {

std::string sha256_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view bytes);

std::string to_hex(std::span<const uint8_t> bytes);
// Throws InvalidArgument on odd length or a non-hex digit.
std::string from_hex(std::string_view hex);

}  // namespace kiln::cache
