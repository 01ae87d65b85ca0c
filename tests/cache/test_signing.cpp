// Ed25519 keys and signatures, and the canonical manifest bytes they sign.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <functional>
#include <set>

#include "cache/manifest.hpp"
#include "cache/signing.hpp"
#include "cache_test_util.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;

TEST_CASE("sign and verify") {
    SigningKey key = SigningKey::generate();
    SigningKey other = SigningKey::generate();
    CHECK_FALSE(key.public_key() == other.public_key());
    std::string msg = "kiln-prebuilt-manifest\nabc\n";
    Signature sig = key.sign(msg);
    CHECK(verify_signature(key.public_key(), msg, sig));
    CHECK_FALSE(verify_signature(other.public_key(), msg, sig));
    CHECK_FALSE(verify_signature(key.public_key(), msg + "x", sig));
    Signature bad = sig;
    bad[10] ^= 1;
    CHECK_FALSE(verify_signature(key.public_key(), msg, bad));
    CHECK_FALSE(verify_signature(key.public_key(), msg, std::span<const uint8_t>(sig.data(), 63)));
    CHECK(key.sign(msg) == sig);  // Ed25519 is deterministic
}

TEST_CASE("key files: private 0600 + public .pub, loaded back") {
    TempDir dir;
    SigningKey key = SigningKey::generate();
    key.write_pair(dir / "k.pem");
    struct stat st {};
    REQUIRE(::stat((dir / "k.pem").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(slurp(dir / "k.pem").find("BEGIN PRIVATE KEY") != std::string::npos);
    CHECK(slurp(dir / "k.pem.pub").find("BEGIN PUBLIC KEY") != std::string::npos);
    PublicKey pub = PublicKey::load_pem(dir / "k.pem.pub");
    CHECK(pub == key.public_key());
    CHECK(PublicKey::load_pem(dir / "k.pem") == key.public_key());  // a private key gives its public half
    SigningKey again = SigningKey::load_pem(dir / "k.pem");
    CHECK(verify_signature(pub, "m", again.sign("m")));
    CHECK(pub.fingerprint().size() == 16);
    CHECK(PublicKey::from_hex(pub.hex()) == pub);
    // Only what was signed by the original key verifies.
    CHECK_FALSE(verify_signature(pub, "m", SigningKey::generate().sign("m")));
}

TEST_CASE("bad key files are refused, naming the file") {
    TempDir dir;
    spit(dir / "junk.pem", "not a key");
    try {
        (void)PublicKey::load_pem(dir / "junk.pem");
        FAIL("expected InvalidArgument");
    } catch (const kiln::InvalidArgument& e) {
        CHECK(std::string(e.what()).find("junk.pem") != std::string::npos);
    }
    CHECK_THROWS_AS(SigningKey::load_pem(dir / "junk.pem"), kiln::InvalidArgument);
    SigningKey::generate().write_pair(dir / "k.pem");
    CHECK_THROWS_AS(SigningKey::load_pem(dir / "k.pem.pub"), kiln::InvalidArgument);  // public key is not a signing key
    CHECK_THROWS_AS(PublicKey::load_pem(dir / "missing.pem"), kiln::IoError);
    CHECK_THROWS_AS(PublicKey::from_hex("abcd"), kiln::InvalidArgument);
}

static ManifestEntry entry(uint64_t seed) {
    Artifact a = make_artifact(seed, 100);
    a.info.sha256 = std::string(64, 'a');
    a.info.bytes = 100;
    return ManifestEntry::from(a.info);
}

TEST_CASE("canonical manifest: order independent, sensitive to every field") {
    std::vector<ManifestEntry> v = {entry(1), entry(2), entry(3)};
    std::string base = canonical_manifest(v);
    std::vector<ManifestEntry> rev(v.rbegin(), v.rend());
    CHECK(canonical_manifest(rev) == base);
    CHECK(base.rfind("kiln-prebuilt-manifest\t", 0) == 0);

    std::vector<std::function<void(ManifestEntry&)>> edits = {
        [](ManifestEntry& e) { e.key.lo ^= 1; },
        [](ManifestEntry& e) { e.kind = ArtifactKind::host_object; },
        [](ManifestEntry& e) { e.sha256[3] = 'b'; },
        [](ManifestEntry& e) { e.size += 1; },
        [](ManifestEntry& e) { e.family += "x"; },
        [](ManifestEntry& e) { e.mode += "x"; },
        [](ManifestEntry& e) { e.m += 1; },
        [](ManifestEntry& e) { e.n += 1; },
        [](ManifestEntry& e) { e.k += 1; },
        [](ManifestEntry& e) { e.experts += 1; },
        [](ManifestEntry& e) { e.weight_format += "x"; },
        [](ManifestEntry& e) { e.act_dtype += "x"; },
        [](ManifestEntry& e) { e.target += "x"; },
        [](ManifestEntry& e) { e.config += "x"; },
        [](ManifestEntry& e) { e.kernel_name += "x"; },
        [](ManifestEntry& e) { e.compiler += "x"; },
    };
    std::set<std::string> seen = {base};
    for (auto& edit : edits) {
        std::vector<ManifestEntry> w = v;
        edit(w[1]);
        seen.insert(canonical_manifest(w));
    }
    CHECK(seen.size() == edits.size() + 1);
    // Dropping an entry changes it too.
    CHECK(canonical_manifest({v[0], v[1]}) != base);
}

static ManifestEntry entry_with(const char* family, const char* mode, const char* config) {
    Artifact a = make_artifact(1, 100, ArtifactKind::cubin, family);
    a.info.mode = mode;
    a.info.config = config;
    a.info.sha256 = std::string(64, 'a');
    a.info.bytes = 100;
    return ManifestEntry::from(a.info);
}

TEST_CASE("canonical manifest: separators inside text fields cannot shift field boundaries") {
    CHECK(canonical_manifest({entry_with("x\ty", "z", "c")}) != canonical_manifest({entry_with("x", "y\tz", "c")}));
    CHECK(canonical_manifest({entry_with("f", "m", "a\nb")}) != canonical_manifest({entry_with("f", "m", "a\\nb")}));
    CHECK(canonical_manifest({entry_with("f", "m", "a\nb")}).find("a\\nb") != std::string::npos);
}
