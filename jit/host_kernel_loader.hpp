// Host-target kernels by descriptor: KernelDescriptor (target host) -> loaded LoadedKernel, memoised
// for the loader's lifetime. The host counterpart of the device dispatch path:
//   canonicalize -> family.host_source -> template headers -> content key (HostCompiler::key)
//   -> object from the store (no clang) | per-key lease -> clang -> O3 -> codegen -> store.put -> link.
// get() on a hit is one lookup of the POD descriptor under a shared lock. Concurrent requests for
// the same kernel compile once (the compiler's in-process single flight, the store's lease across
// processes). build() only makes sure the object is in the store (`kiln jit compile --arch host`).
// Only present when kiln is built with host_jit (KILN_HAVE_HOST_JIT).
#pragma once

#include <memory>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "cache/store.hpp"
#include "jit/descriptor.hpp"
#include "jit/family.hpp"
#include "jit/host_compiler.hpp"
#include "jit/host_object_cache.hpp"
#include "jit/loaded_kernel.hpp"
#include "jit/template_store.hpp"

namespace kiln::jit {

struct HostLoaderOptions {
    cache::Store* store = nullptr;             // not owned; nullptr = compile every process
    const FamilyRegistry* families = nullptr;  // nullptr = builtin_families()
    const TemplateStore* templates = nullptr;  // nullptr = TemplateStore::instance()
    std::optional<HostTarget> target;          // nullptr = this machine
};

struct HostBuildResult {
    KernelDescriptor desc;  // canonical
    cache::ContentKey key;
    std::string target;     // "host-<triple>-<cpu>"
    HostCompileStats stats;
};

class HostKernelLoader {
public:
    explicit HostKernelLoader(HostLoaderOptions options = {});
    ~HostKernelLoader();
    HostKernelLoader(const HostKernelLoader&) = delete;
    HostKernelLoader& operator=(const HostKernelLoader&) = delete;

    // `d.target` must be the host target. Throws InvalidArgument for a descriptor the family
    // rejects, HostCompileError when it must compile and cannot.
    const LoadedKernel& get(const KernelDescriptor& d) {
        {
            std::shared_lock lock(map_mu_);
            auto it = map_.find(d);
            if (it != map_.end()) [[likely]] return *it->second;
        }
        return load_slow(d);
    }

    HostBuildResult build(const KernelDescriptor& d);

    // The compiler's input for a canonical host descriptor (source, headers, entry, columns).
    HostKernelSource source(const KernelDescriptor& canonical) const;
    // How the kernel behind `k` was obtained (compiled or loaded from the store, with timings).
    const HostCompileStats& stats(const LoadedKernel& k) const;

    HostCompiler& compiler() { return compiler_; }
    const StoreHostObjectCache* object_cache() const { return objects_.get(); }

private:
    const LoadedKernel& load_slow(const KernelDescriptor& d);
    KernelDescriptor canonical(const KernelDescriptor& d) const;

    HostLoaderOptions opt_;
    const FamilyRegistry& families_;
    const TemplateStore& templates_;
    std::unique_ptr<StoreHostObjectCache> objects_;
    HostCompiler compiler_;

    mutable std::shared_mutex map_mu_;
    std::unordered_map<KernelDescriptor, const LoadedKernel*, DescriptorHash> map_;
    std::vector<std::unique_ptr<LoadedKernel>> owned_;
    std::unordered_map<const LoadedKernel*, std::shared_ptr<const HostKernelModule>> modules_;
};

}  // namespace kiln::jit
