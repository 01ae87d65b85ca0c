// Host object code in the kernel cache: the HostObjectCache the host compiler persists through,
// backed by the SQLite store (cache::Store, ArtifactKind::host_object).
//
// An object is only handed to the JIT linker when the row's target name equals the running
// compiler's (`host-<triple>-<cpu>`); the CPU features are in the content key, so an object built
// for a CPU with more features than this one has a different key and is never looked up. A row
// that matches the key but names another target (a foreign or doctored cache) is refused with a
// warning and counted, never loaded. Trust of prebuilt layers is the store's business: it returns
// host objects only from the user layer or a trusted signed layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>

#include "cache/store.hpp"
#include "jit/host_compiler.hpp"

namespace kiln::jit {

class StoreHostObjectCache final : public HostObjectCache {
public:
    explicit StoreHostObjectCache(cache::Store& store) : store_(store) {}

    std::optional<std::vector<uint8_t>> load(const cache::ContentKey& key, const std::string& target_name) override;
    void store(const cache::Artifact& artifact) override;
    std::shared_ptr<void> lease(const cache::ContentKey& key) override;

    uint64_t loads() const { return loads_.load(); }      // objects returned
    uint64_t refused() const { return refused_.load(); }  // rows refused for naming another target
    uint64_t stored() const { return stored_.load(); }    // rows inserted

private:
    cache::Store& store_;
    std::atomic<uint64_t> loads_{0}, refused_{0}, stored_{0};
    std::mutex warned_mu_;
    std::set<cache::ContentKey> warned_;  // one warning per refused key
};

}  // namespace kiln::jit
