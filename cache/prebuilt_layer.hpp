// A prebuilt read-only layer (.kcache): opened `file:...?mode=ro&immutable=1`; its manifest is read
// and its signature checked at open, and every blob is re-hashed against the manifest before it is
// returned.
//
// Trust: `trusted` when the manifest is signed by one of the trusted keys; `untrusted_signer` when it
// is validly signed by another key; `unsigned_layer` when it carries no signature. A signature that
// does not verify means the file was modified after signing: opening it throws CacheError. Cubins
// are served at every trust level (after the hash check, with a warning below `trusted`); host
// object code only from a trusted layer.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/manifest.hpp"
#include "cache/sqlite_db.hpp"
#include "cache/store.hpp"

namespace kiln::cache {

enum class Trust { unsigned_layer, untrusted_signer, trusted };
const char* to_string(Trust t);

class PrebuiltLayer {
public:
    // Throws CacheError naming the file when it is missing, not a kiln prebuilt layer, or its
    // manifest signature does not verify.
    PrebuiltLayer(const std::string& path, const std::vector<PublicKey>& trusted_keys);

    const std::string& path() const { return path_; }
    Trust trust() const { return trust_; }
    const std::optional<PublicKey>& signer() const { return signer_; }
    bool serves(ArtifactKind kind) const { return kind == ArtifactKind::cubin || trust_ == Trust::trusted; }
    size_t entries() const { return manifest_.size(); }
    uint64_t file_bytes() const;

    // The manifest's view of `key` (no blob read), or nullptr.
    const ManifestEntry* entry(const ContentKey& key) const;

    // nullopt when the key is not in the manifest or has another kind. Does not apply the trust
    // policy (the caller decides with serves()). Throws CacheError naming the file and key when
    // the row is missing, disagrees with the manifest, or the blob's SHA-256 does not match.
    std::optional<Artifact> read(const ContentKey& key, ArtifactKind kind);

    std::vector<ArtifactInfo> list() const;  // from the manifest, with the row's provenance
    // integrity_check, every row against the manifest, every blob re-hashed. (The signature was
    // checked at open; trust is not an integrity problem: stats() reports it.)
    void verify(uint64_t& checked, std::vector<std::string>& problems);

private:
    std::string path_;
    Db db_;
    mutable std::mutex mu_;
    Stmt get_;
    Trust trust_ = Trust::unsigned_layer;
    std::optional<PublicKey> signer_;
    std::unordered_map<ContentKey, ManifestEntry, ContentKeyHash> manifest_;
};

}  // namespace kiln::cache
