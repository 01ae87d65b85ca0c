// The artifact store: compiled kernels (cubins, host objects) keyed by content key, in SQLite.
//
// Layers, searched in order: prebuilt read-only layers (opened immutable=1; their signed manifest
// is verified at open and every blob is re-hashed before it is returned), then the per-user layer
// (<cache_dir>/kernels.db, WAL, node-local). Writes go to the user layer only: compile outside any
// transaction, then INSERT OR IGNORE inside BEGIN IMMEDIATE. A damaged user DB is moved aside and
// rebuilt; a full disk or unwritable directory disables caching with one warning (get() still
// works, put() returns false). Host object code is only returned from the user layer or a prebuilt
// layer signed by a trusted key; unsigned or untrusted layers serve cubins only, with a warning.
// Trust policy: once any trusted key is configured (or require_signed is set), a prebuilt layer not
// signed by one of the trusted keys is refused whole (CacheError), so stripping or replacing a
// layer's signature cannot downgrade it to "unsigned" and still have it served.
// Thread-safe: one Store may be shared by all threads of a process (do not use it across fork()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_error.hpp"
#include "cache/content_key.hpp"

namespace kiln::cache {

class CompileLease;

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
    bool require_signed = false;            // refuse every prebuilt layer not signed by a trusted key, even
                                            // when no key is configured (then every prebuilt layer)
    uint64_t max_bytes = 0;                 // user-layer size cap; 0 = KILN_CACHE_MAX_SIZE or 10 GiB
    bool read_only = false;                 // never write the user layer (serving from a prebuilt cache)
    uint64_t hard_limit_bytes = 0;          // ceiling on the user DB file (PRAGMA max_page_count); writes
                                            // beyond it fail like a full disk. 0 = none
    std::chrono::milliseconds lease_stale_after{0};  // a compile lease not renewed this long is taken over;
                                                     // 0 = KILN_JIT_LEASE_TIMEOUT, else 30 s
};

// KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
std::string default_cache_dir();

// Options from the environment: KILN_CACHE_DIR, KILN_KERNEL_CACHE and KILN_TRUSTED_KEYS (lists
// separated by ':' or ','), KILN_REQUIRE_SIGNED, KILN_CACHE_MAX_SIZE, KILN_CACHE_READ_ONLY. The Store itself only reads
// KILN_CACHE_DIR and KILN_CACHE_MAX_SIZE (as defaults for empty fields).
StoreOptions store_options_from_env();

// Splits "a:b,c" into {"a", "b", "c"}, dropping empty items.
std::vector<std::string> split_path_list(const std::string& text);

// The cap used when StoreOptions::max_bytes is 0: KILN_CACHE_MAX_SIZE, else 10 GiB.
uint64_t default_max_bytes();

class Store {
public:
    // Throws CacheError when a prebuilt layer cannot be opened, its manifest signature does not
    // verify, or the trust policy refuses it; InvalidArgument when a trusted key file is not an
    // Ed25519 key. Problems with the user
    // layer never throw: they become warnings.
    explicit Store(StoreOptions opts);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    // Prebuilt layers first, then the user layer. Updates hits / last_used in the user layer
    // (buffered in memory, written at most every 30 s, on flush() and on destruction). A prebuilt
    // blob whose hash does not match its manifest is refused with CacheError naming the file and
    // key, never returned; a damaged user-layer row is dropped with a warning and reported as a miss.
    std::optional<Artifact> get(const ContentKey& key, ArtifactKind kind);

    // INSERT OR IGNORE into the user layer. Returns true if this call inserted the row. Returns
    // false (after one warning) when caching is disabled, e.g. the disk is full. Prunes to the cap.
    // Computes info.sha256 and info.bytes from the blob (a given sha256 that disagrees throws
    // InvalidArgument); created_at / last_used are set to now and hits to 0.
    bool put(const Artifact& a);

    // Writes buffered hit counts and last-use times to the user layer.
    void flush();

    // Every warning this store has raised (each was also logged once).
    std::vector<std::string> warnings() const;

    // Cross-process single flight: held while one process compiles a key; others block here,
    // then re-check get(). Released on destruction or process death (flock on
    // <cache_dir>/locks/<key>.lock). The holder renews it while it lives; a waiter says after a few
    // seconds which key and holder pid it waits for, and takes over a lease its holder has not
    // renewed for lease_stale_after (a stopped or hung process), as cache/compile_lease.hpp says.
    // When caching is disabled the lease holds nothing (held() is false): there is nowhere to
    // publish the result, so every process compiles for itself.
    class Lease {
    public:
        Lease();
        Lease(Lease&&) noexcept;
        Lease& operator=(Lease&&) noexcept;
        ~Lease();
        bool held() const { return hold_ != nullptr; }
    private:
        friend class Store;
        std::unique_ptr<CompileLease> hold_;
    };
    // Blocks up to `timeout` for a live holder; throws CacheError on timeout naming the key and lock
    // file. The waiter's messages are warnings of this store.
    Lease lease(const ContentKey& key, std::chrono::milliseconds timeout = std::chrono::minutes(10));

    bool caching_enabled() const;
    std::string user_db_path() const;

    // Inspection and maintenance (the `kiln cache` subcommands).
    std::vector<ArtifactInfo> list() const;  // all layers, prebuilt first; a key may appear in several
    // Unique prefix match over all layers (the layer get() would use). nullopt when nothing matches;
    // InvalidArgument when the prefix is not hex or matches several keys.
    std::optional<ArtifactInfo> find(const std::string& key_or_prefix) const;
    struct LayerStats {
        std::string name;   // "user" or the prebuilt file's path
        std::string path;   // the DB file
        std::string trust;  // "user", "trusted", "untrusted signer", "unsigned"
        std::string signer; // key fingerprint, "" when unsigned
        uint64_t entries = 0, bytes = 0, file_bytes = 0;
    };
    // entries/bytes/hits/by_target count each key once (the layer get() would use).
    struct Stats {
        uint64_t entries = 0, bytes = 0, hits = 0;
        std::vector<std::pair<std::string, uint64_t>> by_target;
        std::vector<LayerStats> layers;
        bool caching_enabled = false;
        std::string disabled_reason;
        uint64_t max_bytes = 0;
    };
    Stats stats() const;
    struct VerifyReport { uint64_t checked = 0; std::vector<std::string> problems; };
    VerifyReport verify() const;                       // integrity_check + re-hash every blob + manifests
    uint64_t prune(uint64_t max_bytes);                // LRU eviction of the user layer; returns bytes freed
    void clear();                                      // empties the user layer; prebuilt files are untouched
    // Writes the user layer as a prebuilt layer (VACUUM INTO a temp file, journal_mode=DELETE, hit
    // counts reset) with a manifest, signed when an Ed25519 private key (PEM file) is given, then
    // renames it into place. Rows whose blob no longer matches its digest are left out.
    void export_layer(const std::string& file, const std::string& sign_key_pem = "") const;
    // Copies the rows of a prebuilt layer into the user layer after verifying each (host objects
    // only from a trusted layer); all or nothing. The trust policy applies as for serving. Returns
    // the number of rows inserted.
    uint64_t import_layer(const std::string& file);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cache
