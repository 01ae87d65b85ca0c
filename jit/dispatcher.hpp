// Dispatcher: KernelDescriptor -> loaded kernel, memoised for the life of the process.
//
// get(d) on a hit is one lock-free lookup of the POD descriptor in an in-process map (a byte hash of
// the descriptor, atomic loads, a byte compare): no source generation, hashing of source or string
// formatting. On a miss:
//   canonicalize -> generate the recipe -> content key (jit/kernel_key.hpp) -> store.get
//   -> (per-key lease -> store.get again -> NVRTC compile -> store.put) -> cuLibraryLoadData
//   -> cuLibraryGetKernel -> opt into the family's dynamic shared memory -> insert.
// Concurrent requests for the same missing kernel compile once: single flight per descriptor and per
// content key inside the process, the store's lease across processes. Failures are not memoised.
//
// build(d) does the same up to the store (compile if missing, no load) and needs no GPU: it is what
// `kiln jit compile` and cache builders use. Without a store (options.store == nullptr) nothing
// persists beyond the process.
//
// Host-target descriptors (d.target.is_host()) go to the HostKernelLoader (jit/host_kernel_loader.hpp):
// in-process clang/LLVM instead of NVRTC, host objects in the same store, no GPU. In a kiln built
// without host_jit they are refused with InvalidArgument.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/store.hpp"
#include "jit/descriptor.hpp"
#include "jit/descriptor_map.hpp"
#include "kiln_config.h"
#include "jit/family.hpp"
#include "jit/kernel_key.hpp"
#include "jit/loaded_kernel.hpp"
#include "jit/single_flight.hpp"
#include "jit/template_store.hpp"

namespace kiln::runtime {
class Context;
}

namespace kiln::jit {

#if KILN_HAVE_HOST_JIT
class HostKernelLoader;
#endif

struct DispatcherOptions {
    cache::Store* store = nullptr;             // not owned; nullptr = no persistent cache
    const FamilyRegistry* families = nullptr;  // nullptr = builtin_families()
    const TemplateStore* templates = nullptr;  // nullptr = TemplateStore::instance()
    int device = 0;                            // CUDA device ordinal kernels are loaded for
    std::chrono::milliseconds lease_timeout = std::chrono::minutes(10);
};

// The outcome of build(): where the artifact came from and what it is.
struct BuildResult {
    KernelDescriptor desc;  // canonical
    cache::ContentKey key;
    bool cache_hit = false;  // found in the store; false = compiled by this call (or by a concurrent one)
    std::string layer;       // store layer it came from ("user", a prebuilt file), "" when compiled
    std::string kernel_name;
    std::string target;      // "sm_90a", or the host target's full name "host-<triple>-<cpu>"
    std::string compiler;    // "nvrtc-13.0", "llvm-14.0.6"
    double compile_ms = 0;   // NVRTC time of the compile that produced it (as recorded in the cache)
    uint64_t bytes = 0;
};

class Dispatcher {
public:
    explicit Dispatcher(DispatcherOptions options = {});
    ~Dispatcher();
    Dispatcher(const Dispatcher&) = delete;
    Dispatcher& operator=(const Dispatcher&) = delete;

    // The loaded kernel for `d` (valid for the Dispatcher's lifetime). Throws NoDevice without a GPU,
    // InvalidArgument for a descriptor its family rejects, CompileError / ToolkitNotFound when it
    // must compile and cannot.
    const LoadedKernel& get(const KernelDescriptor& d) {
        if (const LoadedKernel* k = map_.find(d)) [[likely]] return *k;
        return load_slow(d);
    }

    // Finds or compiles the artifact (no GPU needed).
    BuildResult build(const KernelDescriptor& d);

    // The target kernels are loaded for (from the device; throws NoDevice without one).
    Target device_target();

    struct Stats {
        uint64_t compiles = 0;    // NVRTC and host (clang) compiles run by this dispatcher
        uint64_t store_hits = 0;  // artifacts read from the store
        uint64_t loads = 0;       // libraries loaded
    };
    Stats stats() const;

    // Per-kernel timings of the miss that loaded it, for benchmarks and logs.
    struct LoadTiming {
        double fetch_ms = 0;  // recipe + key + store lookup (and compile, when it compiled)
        double load_ms = 0;   // cuLibraryLoadData + cuLibraryGetKernel + context load + attributes
        double compile_ms = 0;  // NVRTC time, when this miss compiled
        bool compiled = false;
    };
    LoadTiming timing(const LoadedKernel& k) const;

private:
    struct Obtained {
        cache::Artifact artifact;
        bool hit = false;
    };
    const LoadedKernel& load_slow(const KernelDescriptor& d);
    Obtained obtain(const KernelDescriptor& canonical);
    Obtained compile(const KernelDescriptor& canonical, const KernelRecipe& recipe, cache::ContentKey key,
                     const std::string& identity);
    runtime::Context& context();

    DispatcherOptions opt_;
    const FamilyRegistry& families_;
    const TemplateStore& templates_;

    DescriptorMap<const LoadedKernel> map_;  // requested and canonical descriptors -> owned_ entries
    mutable std::mutex owned_mu_;
    std::vector<std::unique_ptr<LoadedKernel>> owned_;
    std::unordered_map<const LoadedKernel*, LoadTiming> timings_;

    SingleFlight<KernelDescriptor, const LoadedKernel*, DescriptorHash> load_flight_;
    SingleFlight<cache::ContentKey, std::shared_ptr<const Obtained>, cache::ContentKeyHash> compile_flight_;

    std::mutex ctx_mu_;
    std::unique_ptr<runtime::Context> ctx_;

    std::atomic<uint64_t> compiles_{0}, store_hits_{0}, loads_{0};

#if KILN_HAVE_HOST_JIT
    HostKernelLoader& host_loader();
    std::mutex host_mu_;
    std::unique_ptr<HostKernelLoader> host_;
    std::unordered_set<const LoadedKernel*> host_counted_;  // host kernels counted in compiles_ / store_hits_
#endif
    const LoadedKernel& load_host(const KernelDescriptor& d);
    BuildResult build_host(const KernelDescriptor& canonical);
};

}  // namespace kiln::jit
