#include "jit/host_object_cache.hpp"

#include "runtime/log.hpp"

namespace kiln::jit {

std::optional<std::vector<uint8_t>> StoreHostObjectCache::load(const cache::ContentKey& key,
                                                               const std::string& target_name) {
    auto a = store_.get(key, cache::ArtifactKind::host_object);
    if (!a) return std::nullopt;
    if (a->info.kind != cache::ArtifactKind::host_object || a->info.target != target_name) {
        refused_.fetch_add(1);
        std::lock_guard lk(warned_mu_);
        if (warned_.insert(key).second)
            log::warn("kernel cache: refusing host object {} ({} layer): built for '{}', this machine is '{}'",
                  key.hex(), a->info.layer.empty() ? "user" : a->info.layer, a->info.target, target_name);
        return std::nullopt;
    }
    loads_.fetch_add(1);
    return std::move(a->blob);
}

void StoreHostObjectCache::store(const cache::Artifact& artifact) {
    if (store_.put(artifact)) stored_.fetch_add(1);
}

std::shared_ptr<void> StoreHostObjectCache::lease(const cache::ContentKey& key) {
    return std::make_shared<cache::Store::Lease>(store_.lease(key));
}

}  // namespace kiln::jit
