#include "cache/signing.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>

#include <fmt/format.h>

#include "cache/atomic_file.hpp"
#include "cache/cache_error.hpp"
#include "cache/digest.hpp"

namespace kiln::cache {

namespace {

struct PkeyFree {
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct BioFree {
    void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxFree {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

std::string openssl_error() {
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    if (e == 0) return "unknown OpenSSL error";
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    return buf;
}

std::string bio_string(BIO* b) {
    char* p = nullptr;
    long n = BIO_get_mem_data(b, &p);
    return std::string(p, static_cast<size_t>(n));
}

BioPtr mem_bio(const std::string& bytes) {
    return BioPtr(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

PublicKey raw_public(EVP_PKEY* k) {
    PublicKey out;
    size_t len = out.raw.size();
    if (EVP_PKEY_get_raw_public_key(k, out.raw.data(), &len) != 1 || len != out.raw.size())
        throw CacheError("cannot extract an Ed25519 public key: " + openssl_error());
    return out;
}

PkeyPtr public_pkey(const PublicKey& key) {
    PkeyPtr p(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.raw.data(), key.raw.size()));
    if (!p) throw CacheError("invalid Ed25519 public key: " + openssl_error());
    return p;
}

}  // namespace

std::string PublicKey::hex() const { return to_hex(raw); }

std::string PublicKey::fingerprint() const { return sha256_hex(raw).substr(0, 16); }

std::string PublicKey::pem() const {
    PkeyPtr p = public_pkey(*this);
    BioPtr b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_PUBKEY(b.get(), p.get()) != 1) throw CacheError("cannot encode public key: " + openssl_error());
    return bio_string(b.get());
}

PublicKey PublicKey::from_hex(std::string_view hex) {
    std::string bytes = kiln::cache::from_hex(hex);
    PublicKey k;
    if (bytes.size() != k.raw.size())
        throw InvalidArgument(fmt::format("'{}' is not an Ed25519 public key (expected 64 hex digits)", hex));
    std::copy(bytes.begin(), bytes.end(), k.raw.begin());
    return k;
}

PublicKey PublicKey::load_pem(const std::string& file) {
    std::string text = read_file(file);
    BioPtr b = mem_bio(text);
    PkeyPtr p(PEM_read_bio_PUBKEY(b.get(), nullptr, nullptr, nullptr));
    if (!p) {
        ERR_clear_error();
        b = mem_bio(text);
        p.reset(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
    }
    if (!p) throw InvalidArgument(fmt::format("{}: not a PEM public or private key ({})", file, openssl_error()));
    if (EVP_PKEY_get_id(p.get()) != EVP_PKEY_ED25519)
        throw InvalidArgument(fmt::format("{}: not an Ed25519 key", file));
    return raw_public(p.get());
}

SigningKey SigningKey::generate() {
    EVP_PKEY* k = nullptr;
    std::unique_ptr<EVP_PKEY_CTX, void (*)(EVP_PKEY_CTX*)> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr),
                                                                 EVP_PKEY_CTX_free);
    if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &k) != 1)
        throw CacheError("Ed25519 key generation failed: " + openssl_error());
    return SigningKey(k);
}

SigningKey SigningKey::load_pem(const std::string& file) {
    std::string text = read_file(file);
    BioPtr b = mem_bio(text);
    PkeyPtr p(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
    if (!p) throw InvalidArgument(fmt::format("{}: not a PEM private key ({})", file, openssl_error()));
    if (EVP_PKEY_get_id(p.get()) != EVP_PKEY_ED25519)
        throw InvalidArgument(fmt::format("{}: not an Ed25519 private key", file));
    return SigningKey(p.release());
}

SigningKey::SigningKey(SigningKey&& o) noexcept : pkey_(o.pkey_) { o.pkey_ = nullptr; }

SigningKey& SigningKey::operator=(SigningKey&& o) noexcept {
    if (this != &o) {
        EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_));
        pkey_ = o.pkey_;
        o.pkey_ = nullptr;
    }
    return *this;
}

SigningKey::~SigningKey() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }

PublicKey SigningKey::public_key() const { return raw_public(static_cast<EVP_PKEY*>(pkey_)); }

Signature SigningKey::sign(std::string_view message) const {
    MdCtxPtr ctx(EVP_MD_CTX_new());
    Signature sig{};
    size_t len = sig.size();
    if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, static_cast<EVP_PKEY*>(pkey_)) != 1 ||
        EVP_DigestSign(ctx.get(), sig.data(), &len, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) != 1 ||
        len != sig.size())
        throw CacheError("Ed25519 signing failed: " + openssl_error());
    return sig;
}

std::string SigningKey::private_pem() const {
    BioPtr b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_PrivateKey(b.get(), static_cast<EVP_PKEY*>(pkey_), nullptr, nullptr, 0, nullptr,
                                       nullptr) != 1)
        throw CacheError("cannot encode private key: " + openssl_error());
    return bio_string(b.get());
}

void SigningKey::write_pair(const std::string& file) const {
    write_file_atomic(file, private_pem(), 0600);
    write_file_atomic(file + ".pub", public_key().pem(), 0644);
}

bool verify_signature(const PublicKey& key, std::string_view message, std::span<const uint8_t> signature) {
    if (signature.size() != Signature{}.size()) return false;
    PkeyPtr p = public_pkey(key);
    MdCtxPtr ctx(EVP_MD_CTX_new());
    if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, p.get()) != 1)
        throw CacheError("Ed25519 verification setup failed: " + openssl_error());
    int rc = EVP_DigestVerify(ctx.get(), signature.data(), signature.size(),
                              reinterpret_cast<const unsigned char*>(message.data()), message.size());
    ERR_clear_error();
    return rc == 1;
}

}  // namespace kiln::cache
