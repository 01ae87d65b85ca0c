// Ed25519 keys and signatures (OpenSSL EVP) for prebuilt cache manifests.
//
// Keys live in PEM files: the private key as PKCS#8 ("PRIVATE KEY", mode 0600), the public key as
// SubjectPublicKeyInfo ("PUBLIC KEY"). A key's fingerprint is the first 16 hex digits of the
// SHA-256 of its 32 raw public-key bytes; it is what warnings and `kiln cache stats` print.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::cache {

struct PublicKey {
    std::array<uint8_t, 32> raw{};

    std::string hex() const;
    std::string fingerprint() const;
    std::string pem() const;
    static PublicKey from_hex(std::string_view hex);  // throws InvalidArgument
    // A PEM public key, or a PEM private key (its public half is used). Throws InvalidArgument
    // naming the file when it is not an Ed25519 key.
    static PublicKey load_pem(const std::string& file);

    friend bool operator==(const PublicKey&, const PublicKey&) = default;
};

using Signature = std::array<uint8_t, 64>;

class SigningKey {
public:
    static SigningKey generate();
    static SigningKey load_pem(const std::string& file);  // throws InvalidArgument naming the file
    SigningKey(SigningKey&&) noexcept;
    SigningKey& operator=(SigningKey&&) noexcept;
    ~SigningKey();

    PublicKey public_key() const;
    Signature sign(std::string_view message) const;
    std::string private_pem() const;

    // Writes `file` (private, 0600) and `file`.pub (public, 0644), each atomically.
    void write_pair(const std::string& file) const;

private:
    explicit SigningKey(void* pkey) : pkey_(pkey) {}
    void* pkey_ = nullptr;  // EVP_PKEY*
};

bool verify_signature(const PublicKey& key, std::string_view message, std::span<const uint8_t> signature);

}  // namespace kiln::cache
