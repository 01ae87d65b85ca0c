// `--api-key`: clients send `Authorization: Bearer <key>` on every /v1 route. The SHA-256 digests
// of the sent and the configured key are compared in constant time, so timing reveals nothing of
// the key (vLLM does the same).
#pragma once

#include <string>
#include <string_view>

namespace kiln::serving::http {

class ApiKey {
public:
    explicit ApiKey(const std::string& key);  // empty: no key required

    bool required() const { return !digest_.empty(); }
    // Whether an Authorization header value grants access (always, when no key is required).
    bool allows(std::string_view authorization) const;

private:
    std::string digest_;
};

}  // namespace kiln::serving::http
