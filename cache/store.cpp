#include "cache/store.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <tuple>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cache/compile_lease.hpp"
#include "cache/digest.hpp"
#include "cache/prebuilt_layer.hpp"
#include "cache/signing.hpp"
#include "cache/user_layer.hpp"
#include "cache/warnings.hpp"
#include "runtime/env.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;

const char* to_string(ArtifactKind k) {
    switch (k) {
    case ArtifactKind::cubin: return "cubin";
    case ArtifactKind::host_object: return "host_object";
    }
    return "?";
}

std::string default_cache_dir() {
    if (auto d = env::get("KILN_CACHE_DIR")) return *d;
    if (auto x = env::get("XDG_CACHE_HOME"); x && fs::path(*x).is_absolute()) return (fs::path(*x) / "kiln").string();
    std::string home;
    if (auto h = env::get("HOME")) home = *h;
    else if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) home = pw->pw_dir;
    if (home.empty()) throw InvalidArgument("cannot find a cache directory: set KILN_CACHE_DIR (or HOME)");
    return (fs::path(home) / ".cache" / "kiln").string();
}

std::vector<std::string> split_path_list(const std::string& text) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : text) {
        if (c == ':' || c == ',') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

uint64_t default_max_bytes() {
    if (auto v = env::get("KILN_CACHE_MAX_SIZE")) {
        try {
            return env::parse_size(*v);
        } catch (const InvalidArgument& e) {
            throw InvalidArgument(fmt::format("KILN_CACHE_MAX_SIZE: {}", e.what()));
        }
    }
    return 10ull << 30;
}

StoreOptions store_options_from_env() {
    StoreOptions o;
    if (auto d = env::get("KILN_CACHE_DIR")) o.cache_dir = *d;
    if (auto p = env::get("KILN_KERNEL_CACHE")) o.prebuilt = split_path_list(*p);
    if (auto t = env::get("KILN_TRUSTED_KEYS")) o.trusted_keys = split_path_list(*t);
    o.max_bytes = default_max_bytes();
    o.read_only = env::get_bool("KILN_CACHE_READ_ONLY", false);
    o.require_signed = env::get_bool("KILN_REQUIRE_SIGNED", false);
    return o;
}

// ---- Lease ----

Store::Lease::Lease() = default;
Store::Lease::Lease(Lease&&) noexcept = default;
Store::Lease& Store::Lease::operator=(Lease&&) noexcept = default;
Store::Lease::~Lease() = default;

// ---- Store ----

struct Store::Impl {
    StoreOptions opts;
    std::string dir;
    WarningSink warnings;
    std::vector<PublicKey> trusted;
    std::vector<std::unique_ptr<PrebuiltLayer>> prebuilt;
    std::unique_ptr<UserLayer> user;

    // The trust policy (store.hpp): throws CacheError for a layer it refuses.
    void admit(const PrebuiltLayer& layer) const {
        if (layer.trust() == Trust::trusted || (trusted.empty() && !opts.require_signed)) return;
        const std::string why = trusted.empty()
                                    ? "--require-signed (KILN_REQUIRE_SIGNED) is set and no trusted key is given "
                                      "(--trusted-key / KILN_TRUSTED_KEYS)"
                                    : "trusted keys are configured (--trusted-key / KILN_TRUSTED_KEYS), so a prebuilt "
                                      "cache must be signed by one of them";
        if (layer.trust() == Trust::unsigned_layer)
            throw CacheError(fmt::format("prebuilt cache {} is not signed; refusing it: {}", layer.path(), why));
        throw CacheError(fmt::format("prebuilt cache {} is signed by key {}, which is not trusted; refusing it: {}",
                                     layer.path(), layer.signer()->fingerprint(), why));
    }
};

Store::Store(StoreOptions opts) : impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    s.dir = opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir;
    if (opts.max_bytes == 0) opts.max_bytes = default_max_bytes();
    if (opts.lease_stale_after.count() <= 0) opts.lease_stale_after = lease_stale_after_from_env();
    s.opts = std::move(opts);
    for (const auto& file : s.opts.trusted_keys) s.trusted.push_back(PublicKey::load_pem(file));
    for (const auto& file : s.opts.prebuilt) {
        auto layer = std::make_unique<PrebuiltLayer>(file, s.trusted);
        s.admit(*layer);
        if (layer->trust() == Trust::unsigned_layer)
            s.warnings.warn(fmt::format(
                "prebuilt cache {} is not signed: its cubins are used after their SHA-256 is checked against its "
                "manifest; host object code in it is ignored",
                file));
        else if (layer->trust() == Trust::untrusted_signer)
            s.warnings.warn(fmt::format(
                "prebuilt cache {} is signed by key {}, which is not trusted (see --trusted-key / KILN_TRUSTED_KEYS): "
                "its cubins are used after their SHA-256 is checked; host object code in it is ignored",
                file, layer->signer()->fingerprint()));
        s.prebuilt.push_back(std::move(layer));
    }
    UserLayer::Options uo;
    uo.dir = s.dir;
    uo.max_bytes = s.opts.max_bytes;
    uo.hard_limit_bytes = s.opts.hard_limit_bytes;
    uo.read_only = s.opts.read_only;
    s.user = std::make_unique<UserLayer>(uo, s.warnings);
}

Store::~Store() = default;

std::optional<Artifact> Store::get(const ContentKey& key, ArtifactKind kind) {
    Impl& s = *impl_;
    for (auto& layer : s.prebuilt) {
        const ManifestEntry* e = layer->entry(key);
        if (e == nullptr || e->kind != kind) continue;
        if (!layer->serves(kind)) {
            s.warnings.warn_once("host-object-ignored:" + layer->path(),
                                 fmt::format("prebuilt cache {} is {}: ignoring its host object code (key {})",
                                             layer->path(), to_string(layer->trust()), key.hex()));
            continue;
        }
        return layer->read(key, kind);
    }
    return s.user->get(key, kind);
}

bool Store::put(const Artifact& a) {
    Impl& s = *impl_;
    if (a.blob.empty()) throw InvalidArgument(fmt::format("cache put: key {}: empty blob", a.info.key.hex()));
    ArtifactInfo info = a.info;
    info.bytes = a.blob.size();
    info.sha256 = sha256_hex(a.blob);
    if (!a.info.sha256.empty() && a.info.sha256 != info.sha256)
        throw InvalidArgument(fmt::format("cache put: key {}: given sha256 {} does not match the blob ({})",
                                          a.info.key.hex(), a.info.sha256, info.sha256));
    if (!s.user->writable()) return false;
    if (info.bytes > s.opts.max_bytes) {
        s.warnings.warn(fmt::format("key {}: artifact of {} bytes is larger than the cache cap ({} bytes); not stored",
                                    info.key.hex(), info.bytes, s.opts.max_bytes));
        return false;
    }
    return s.user->put(info, a.blob);
}

void Store::flush() { impl_->user->flush(); }

std::vector<std::string> Store::warnings() const { return impl_->warnings.all(); }

Store::Lease Store::lease(const ContentKey& key, std::chrono::milliseconds timeout) {
    Impl& s = *impl_;
    Lease out;
    if (!s.user->writable()) return out;
    std::string path = (fs::path(s.dir) / "locks" / (key.hex() + ".lock")).string();
    LeaseTiming timing;
    timing.wait = timeout;
    timing.stale_after = s.opts.lease_stale_after;
    try {
        out.hold_ = CompileLease::acquire(path, key.hex(), timing, [&s](const std::string& m) { s.warnings.warn(m); });
    } catch (const IoError& e) {
        s.warnings.warn_once("lease-unavailable",
                             fmt::format("compile leases unavailable ({}); concurrent processes may compile the same "
                                         "kernel",
                                         e.what()));
        return out;
    }
    if (!out.held())
        throw CacheError(fmt::format("timed out after {:.1f} s waiting for the compile lease on key {} ({} is held by "
                                     "another process)",
                                     std::chrono::duration<double>(timeout).count(), key.hex(), path));
    return out;
}

bool Store::caching_enabled() const { return impl_->user->writable(); }

std::string Store::user_db_path() const { return impl_->user->db_path(); }

std::vector<ArtifactInfo> Store::list() const {
    std::vector<ArtifactInfo> out;
    for (auto& layer : impl_->prebuilt) {
        auto v = layer->list();
        std::sort(v.begin(), v.end(), [](const ArtifactInfo& a, const ArtifactInfo& b) {
            return std::tie(a.family, a.mode, a.m, a.n, a.k, a.experts, a.target, a.key) <
                   std::tie(b.family, b.mode, b.m, b.n, b.k, b.experts, b.target, b.key);
        });
        out.insert(out.end(), v.begin(), v.end());
    }
    auto u = impl_->user->list();
    out.insert(out.end(), u.begin(), u.end());
    return out;
}

std::optional<ArtifactInfo> Store::find(const std::string& key_or_prefix) const {
    std::string p;
    for (char c : key_or_prefix) p += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (p.empty() || p.size() > 32 || p.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw InvalidArgument(fmt::format("'{}' is not a cache key or key prefix (1 to 32 hex digits)", key_or_prefix));
    std::map<ContentKey, ArtifactInfo> found;  // first layer wins, as in get()
    for (auto& layer : impl_->prebuilt)
        for (auto& a : layer->list())
            if (a.key.hex().compare(0, p.size(), p) == 0) found.emplace(a.key, a);
    for (auto& a : impl_->user->find_prefix(p)) found.emplace(a.key, a);
    if (found.empty()) return std::nullopt;
    if (found.size() > 1)
        throw InvalidArgument(fmt::format("key prefix '{}' is ambiguous: it matches {} and {}{}; give more digits", p,
                                          found.begin()->first.hex(), std::next(found.begin())->first.hex(),
                                          found.size() > 2 ? " and more" : ""));
    return found.begin()->second;
}

Store::Stats Store::stats() const {
    Impl& s = *impl_;
    Stats st;
    std::set<ContentKey> seen;
    std::map<std::string, uint64_t> by_target;
    auto count = [&](const std::vector<ArtifactInfo>& v, LayerStats& ls) {
        for (const auto& a : v) {
            ls.entries += 1;
            ls.bytes += a.bytes;
            if (!seen.insert(a.key).second) continue;
            st.entries += 1;
            st.bytes += a.bytes;
            st.hits += static_cast<uint64_t>(a.hits);
            by_target[a.target] += a.bytes;
        }
    };
    for (auto& layer : s.prebuilt) {
        LayerStats ls;
        ls.name = ls.path = layer->path();
        ls.trust = to_string(layer->trust());
        if (layer->signer()) ls.signer = layer->signer()->fingerprint();
        ls.file_bytes = layer->file_bytes();
        count(layer->list(), ls);
        st.layers.push_back(ls);
    }
    LayerStats us;
    us.name = "user";
    us.path = s.user->db_path();
    us.trust = "user";
    us.file_bytes = s.user->file_bytes();
    count(s.user->list(), us);
    st.layers.push_back(us);
    st.by_target.assign(by_target.begin(), by_target.end());
    st.caching_enabled = s.user->writable();
    st.disabled_reason = s.user->disabled_reason();
    st.max_bytes = s.opts.max_bytes;
    return st;
}

Store::VerifyReport Store::verify() const {
    VerifyReport r;
    for (auto& layer : impl_->prebuilt) layer->verify(r.checked, r.problems);
    impl_->user->verify(r.checked, r.problems);
    return r;
}

uint64_t Store::prune(uint64_t max_bytes) { return impl_->user->prune(max_bytes); }

void Store::clear() { impl_->user->clear(); }

void Store::export_layer(const std::string& file, const std::string& sign_key_pem) const {
    std::optional<SigningKey> key;
    if (!sign_key_pem.empty()) key = SigningKey::load_pem(sign_key_pem);
    for (auto& layer : impl_->prebuilt) {
        std::error_code ec;
        if (fs::equivalent(layer->path(), file, ec))
            throw InvalidArgument(fmt::format("cannot export over {}: it is a prebuilt layer in use", file));
    }
    impl_->user->export_to(file, key ? &*key : nullptr);
}

uint64_t Store::import_layer(const std::string& file) {
    Impl& s = *impl_;
    PrebuiltLayer layer(file, s.trusted);
    s.admit(layer);
    if (layer.trust() != Trust::trusted)
        s.warnings.warn(fmt::format("importing {}: the layer is {}; only its cubins are imported", file,
                                    to_string(layer.trust())));
    return s.user->import_from(layer);
}

}  // namespace kiln::cache
