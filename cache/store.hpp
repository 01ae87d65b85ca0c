// The artifact store: compiled kernels (cubins, host objects) keyed by content key, in SQLite.
//
// Layers, searched in order: prebuilt read-only layers (opened immutable=1; their signed manifest
// is verified at open and every blob is re-hashed before it is returned), then the per-user layer
// (WAL, node-local). Writes go to the user layer only: compile outside any transaction, then
// INSERT OR IGNORE inside BEGIN IMMEDIATE. A damaged user DB is moved aside and rebuilt; a full
// disk disables caching with one warning. Host object code is only returned from the user layer
// or a prebuilt layer signed by a trusted key.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/content_key.hpp"

namespace kiln::cache {

enum class ArtifactKind : uint8_t { cubin = 0, host_object = 1 };
const char* to_string(ArtifactKind k);

// Descriptor columns (indexed, for `kiln cache ls`) plus provenance. The key decides hits.
struct ArtifactInfo {
    ContentKey key;
    ArtifactKind kind = ArtifactKind::cubin;
    std::string family;         // e.g. "moe_w4a16"
    std::string mode;           // e.g. "indexed"
    int64_t m = 0, n = 0, k = 0, experts = 0;
    std::string weight_format;  // e.g. "int4_g32_bf16", "" when not applicable
    std::string act_dtype;      // e.g. "bf16"
    std::string target;         // "sm_90a", or "host-<triple>-<cpu>"
    std::string config;         // canonical tuning config text, e.g. "bm=8,bn=256,bk=64,st=4,cta=4"
    std::string kernel_name;    // symbol to load (lowered name for NVRTC)
    std::string compiler;       // e.g. "nvrtc-13.0", "llvm-14.0.6"
    double compile_ms = 0;
    uint64_t bytes = 0;         // blob size
    std::string sha256;         // hex digest of the blob
    int64_t created_at = 0;     // unix seconds
    int64_t last_used = 0;
    int64_t hits = 0;
    std::string layer;          // filled on reads: "user" or the prebuilt file's path
};

struct Artifact {
    ArtifactInfo info;
    std::vector<uint8_t> blob;
};

struct StoreOptions {
    std::string cache_dir;                  // user layer directory; "" = default_cache_dir()
    std::vector<std::string> prebuilt;      // prebuilt layer files (.kcache), searched before the user layer
    std::vector<std::string> trusted_keys;  // Ed25519 public keys (PEM files) trusted to sign prebuilt layers
    uint64_t max_bytes = 0;                 // user-layer size cap; 0 = KILN_CACHE_MAX_SIZE or 10 GiB
    bool read_only = false;                 // never write the user layer (serving from a prebuilt cache)
};

// KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
std::string default_cache_dir();

class Store {
public:
    explicit Store(StoreOptions opts);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    // Prebuilt layers first, then the user layer. Updates hits / last_used (rate-limited) in the
    // user layer. A blob whose hash does not match is refused with CacheError, never returned.
    std::optional<Artifact> get(const ContentKey& key, ArtifactKind kind);

    // INSERT OR IGNORE into the user layer. Returns true if this call inserted the row. Returns
    // false (after one warning) when caching is disabled, e.g. the disk is full. Prunes to the cap.
    bool put(const Artifact& a);

    // Cross-process single flight: held while one process compiles a key; others block here,
    // then re-check get(). Released on destruction or process death (flock on locks/<key>).
    class Lease {
    public:
        Lease() = default;
        Lease(Lease&&) noexcept;
        Lease& operator=(Lease&&) noexcept;
        ~Lease();
        bool held() const { return fd_ >= 0; }
    private:
        friend class Store;
        int fd_ = -1;
    };
    // Blocks up to `timeout`; throws CacheError on timeout naming the key and lock file.
    Lease lease(const ContentKey& key, std::chrono::milliseconds timeout = std::chrono::minutes(10));

    bool caching_enabled() const;
    std::string user_db_path() const;

    // Inspection and maintenance (the `kiln cache` subcommands).
    std::vector<ArtifactInfo> list() const;                                 // all layers
    std::optional<ArtifactInfo> find(const std::string& key_or_prefix) const;  // unique prefix match
    struct Stats { uint64_t entries = 0, bytes = 0, hits = 0; std::vector<std::pair<std::string, uint64_t>> by_target; };
    Stats stats() const;
    struct VerifyReport { uint64_t checked = 0; std::vector<std::string> problems; };
    VerifyReport verify() const;                       // integrity_check + re-hash every blob + manifests
    uint64_t prune(uint64_t max_bytes);                // LRU eviction; returns bytes freed
    void clear();
    // Writes a prebuilt layer (journal_mode=DELETE, compacted) with a manifest, signed when a key is given.
    void export_layer(const std::string& file, const std::string& sign_key_pem = "") const;
    uint64_t import_layer(const std::string& file);    // copies verified rows into the user layer

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cache
