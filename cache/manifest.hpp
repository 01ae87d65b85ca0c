// The manifest of a prebuilt layer and its Ed25519 signature.
//
// manifest(key PK, kind, sha256, size, family, mode, m, n, k, experts, weight_format, act_dtype,
//          target, config, kernel_name, compiler): one row per artifact; the descriptor and the blob's
//          digest, i.e. everything that decides what gets loaded.
// signature(id = 1, algorithm = "ed25519", public_key (hex), signature (hex), signed_at)
//
// The signed bytes are canonical_manifest(): a header line, then one line per entry in key order,
// fields separated by TAB, text fields escaped (\\ \t \n \r), integers in decimal. The same rows
// always give the same bytes, whatever order they were inserted in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cache/signing.hpp"
#include "cache/sqlite_db.hpp"
#include "cache/store.hpp"

namespace kiln::cache {

struct ManifestEntry {
    ContentKey key;
    ArtifactKind kind = ArtifactKind::cubin;
    std::string sha256;
    uint64_t size = 0;
    std::string family, mode;
    int64_t m = 0, n = 0, k = 0, experts = 0;
    std::string weight_format, act_dtype, target, config, kernel_name, compiler;

    static ManifestEntry from(const ArtifactInfo& a);
    // Overwrites the signed fields of `a` with the manifest's.
    void apply_to(ArtifactInfo& a) const;
    // Names the first field of `a` that differs from the manifest, or "" when all agree.
    std::string mismatch(const ArtifactInfo& a) const;
};

struct SignatureRecord {
    std::string algorithm = "ed25519";
    PublicKey key;
    Signature signature{};
    int64_t signed_at = 0;
};

// `entries` in any order; the result is sorted by key.
std::string canonical_manifest(std::vector<ManifestEntry> entries);

void create_manifest_tables(Db& db);
void write_manifest(Db& db, const std::vector<ManifestEntry>& entries);
// Empty when the table is missing. Throws CacheError naming the file on malformed rows.
std::vector<ManifestEntry> read_manifest(const Db& db);
bool has_manifest(const Db& db);

void write_signature(Db& db, const SignatureRecord& sig);
// nullopt when the layer is unsigned; CacheError when the row is malformed.
std::optional<SignatureRecord> read_signature(const Db& db);

}  // namespace kiln::cache
