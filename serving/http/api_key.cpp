#include "serving/http/api_key.hpp"

#include "cache/digest.hpp"

namespace kiln::serving::http {

ApiKey::ApiKey(const std::string& key) : digest_(key.empty() ? std::string() : cache::sha256_hex(key)) {}

bool ApiKey::allows(std::string_view authorization) const {
    if (!required()) return true;
    constexpr std::string_view scheme = "Bearer ";
    if (authorization.size() < scheme.size()) return false;
    // The scheme is case-insensitive (RFC 9110); the key is not.
    for (size_t i = 0; i < scheme.size(); ++i)
        if ((authorization[i] | 0x20) != (scheme[i] | 0x20)) return false;
    const std::string sent = cache::sha256_hex(authorization.substr(scheme.size()));
    unsigned diff = 0;
    for (size_t i = 0; i < digest_.size(); ++i) diff |= unsigned(uint8_t(sent[i]) ^ uint8_t(digest_[i]));
    return diff == 0;
}

}  // namespace kiln::serving::http
