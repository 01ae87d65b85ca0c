#include "cache/prebuilt_layer.hpp"

#include <sqlite3.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "cache/digest.hpp"
#include "cache/schema.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;

const char* to_string(Trust t) {
    switch (t) {
    case Trust::unsigned_layer: return "unsigned";
    case Trust::untrusted_signer: return "untrusted signer";
    case Trust::trusted: return "trusted";
    }
    return "?";
}

PrebuiltLayer::PrebuiltLayer(const std::string& path, const std::vector<PublicKey>& trusted_keys) : path_(path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw CacheError(fmt::format("prebuilt cache {}: no such file", path));
    std::string abs = fs::absolute(path, ec).lexically_normal().string();
    try {
        db_ = Db(sqlite_uri(abs, "mode=ro&immutable=1"), SQLITE_OPEN_READONLY, path);
        db_.exec(fmt::format("PRAGMA cache_size = {}", k_cache_size_pragma));
        SchemaInfo schema = inspect_schema(db_);
        if (schema.state == SchemaState::foreign || schema.state == SchemaState::empty)
            throw CacheError(fmt::format("prebuilt cache {}: not a kiln cache file", path));
        if (schema.state == SchemaState::newer)
            throw CacheError(fmt::format("prebuilt cache {}: written by a newer kiln (schema {}, this kiln reads {})",
                                         path, schema.version, k_schema_version));
        if (schema.state != SchemaState::current)
            throw CacheError(fmt::format("prebuilt cache {}: unsupported schema version {}", path, schema.version));
        if (meta_value(db_, "layer") != "prebuilt" || !has_manifest(db_))
            throw CacheError(fmt::format(
                "prebuilt cache {}: not a prebuilt layer (a user cache DB? make one with `kiln cache export`)", path));
        std::vector<ManifestEntry> entries = read_manifest(db_);
        std::optional<SignatureRecord> sig = read_signature(db_);
        if (sig) {
            std::string canonical = canonical_manifest(entries);
            if (!verify_signature(sig->key, canonical, sig->signature))
                throw CacheError(fmt::format(
                    "prebuilt cache {}: manifest signature does not verify (signer {}): the file was modified "
                    "after it was signed; refusing it",
                    path, sig->key.fingerprint()));
            signer_ = sig->key;
            trust_ = Trust::untrusted_signer;
            for (const auto& k : trusted_keys)
                if (k == sig->key) trust_ = Trust::trusted;
        }
        for (auto& e : entries) manifest_.emplace(e.key, std::move(e));
        get_ = db_.prepare(fmt::format("SELECT rowid, {} FROM artifacts WHERE key = ?1", k_info_columns));
    } catch (const SqliteError& e) {
        throw CacheError(fmt::format("prebuilt cache {}: cannot be read: {}", path, e.what()));
    }
}

uint64_t PrebuiltLayer::file_bytes() const {
    std::error_code ec;
    auto n = fs::file_size(path_, ec);
    return ec ? 0 : n;
}

const ManifestEntry* PrebuiltLayer::entry(const ContentKey& key) const {
    auto it = manifest_.find(key);
    return it == manifest_.end() ? nullptr : &it->second;
}

std::optional<Artifact> PrebuiltLayer::read(const ContentKey& key, ArtifactKind kind) {
    const ManifestEntry* m = entry(key);
    if (m == nullptr || m->kind != kind) return std::nullopt;
    Artifact a;
    {
        std::lock_guard<std::mutex> lock(mu_);
        try {
            get_.bind(1, key.hex());
            if (!get_.step()) {
                get_.reset();
                throw CacheError(fmt::format("prebuilt cache {}: key {} is in the manifest but its artifact is missing",
                                             path_, key.hex()));
            }
            a.info = read_info(get_, path_, 1);
            db_.read_blob("artifacts", "blob", get_.i64(0), a.blob);
            get_.reset();
        } catch (const SqliteError& e) {
            get_.reset();
            throw CacheError(fmt::format("prebuilt cache {}: key {}: cannot be read: {}", path_, key.hex(), e.what()));
        }
    }
    if (std::string field = m->mismatch(a.info); !field.empty())
        throw CacheError(fmt::format("prebuilt cache {}: key {}: artifact {} does not match the manifest (tampered?)",
                                     path_, key.hex(), field));
    std::string digest = sha256_hex(a.blob);
    if (a.blob.size() != m->size || digest != m->sha256)
        throw CacheError(fmt::format(
            "prebuilt cache {}: key {}: blob SHA-256 {} does not match the manifest's {} (tampered or damaged); refusing it",
            path_, key.hex(), digest, m->sha256));
    a.info.hits = 0;
    a.info.last_used = 0;
    a.info.layer = path_;
    return a;
}

std::vector<ArtifactInfo> PrebuiltLayer::list() const {
    std::vector<ArtifactInfo> out;
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s = db_.prepare("SELECT key, compile_ms, created_at FROM artifacts");
    std::unordered_map<ContentKey, std::pair<double, int64_t>, ContentKeyHash> prov;
    while (s.step()) {
        try {
            prov[ContentKey::parse(s.text(0))] = {s.f64(1), s.i64(2)};
        } catch (const InvalidArgument&) {
        }
    }
    for (const auto& [key, e] : manifest_) {
        ArtifactInfo a;
        e.apply_to(a);
        if (auto it = prov.find(key); it != prov.end()) {
            a.compile_ms = it->second.first;
            a.created_at = it->second.second;
        }
        a.layer = path_;
        out.push_back(std::move(a));
    }
    return out;
}

void PrebuiltLayer::verify(uint64_t& checked, std::vector<std::string>& problems) {
    std::lock_guard<std::mutex> lock(mu_);
    try {
        Stmt ic = db_.prepare("PRAGMA integrity_check");
        while (ic.step())
            if (ic.text(0) != "ok") problems.push_back(fmt::format("{}: integrity_check: {}", path_, ic.text(0)));
        std::set<ContentKey> seen;
        Stmt s = db_.prepare(fmt::format("SELECT {}, blob FROM artifacts", k_info_columns));
        while (s.step()) {
            ++checked;
            ArtifactInfo a = read_info(s, path_);
            seen.insert(a.key);
            const ManifestEntry* m = entry(a.key);
            if (m == nullptr) {
                problems.push_back(fmt::format("{}: key {}: artifact not listed in the manifest", path_, a.key.hex()));
                continue;
            }
            if (std::string field = m->mismatch(a); !field.empty())
                problems.push_back(fmt::format("{}: key {}: {} differs from the manifest", path_, a.key.hex(), field));
            auto blob = s.blob(k_info_column_count);
            if (blob.size() != m->size || sha256_hex(blob) != m->sha256)
                problems.push_back(fmt::format("{}: key {}: blob SHA-256 does not match the manifest", path_, a.key.hex()));
        }
        for (const auto& [key, e] : manifest_)
            if (!seen.count(key))
                problems.push_back(fmt::format("{}: key {}: listed in the manifest but missing", path_, key.hex()));
    } catch (const Error& e) {
        problems.push_back(fmt::format("{}: {}", path_, e.what()));
    }
}

}  // namespace kiln::cache
