// The host target's compiler: a generated C++ translation unit (plus the template headers it
// includes, all in memory) → in-process clang → LLVM IR → the O3 pipeline → machine code for one
// CPU, loaded through ORC LLJIT.
//
// - Target: triple, CPU and CPU features (detected from the machine by default); its name is
//   `host-<triple>-<cpu>`. One TargetMachine per compiler serves the IR optimiser and codegen.
// - Keys: XXH3-128 over the source, every header (name and bytes), the canonical front-end
//   options, the pipeline, the LLVM version, triple, CPU, full feature list, kernel ABI version and
//   entry names. The LLVM module identifier is the key, so LLVM's ObjectCache hook stores and finds
//   the object under it. No absolute paths go into the key.
// - Lookup order of load(): in-process map (one compile per key, concurrent callers wait) → the
//   object cache (no clang run on a hit) → compile under the cache's per-key lease → store → load.
// - The clang front end is not thread-safe: every front-end run holds one process-wide mutex and
//   is counted (clang_invocations()). Codegen and JIT linking are serialised per compiler.
// - A compiler for another CPU (a target that is not the running machine) only builds objects into
//   the cache (build()); load() refuses it.
// Only present when kiln is built with host_jit (KILN_HAVE_HOST_JIT).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/content_key.hpp"
#include "cache/store.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

// clang rejected a host kernel, or LLVM failed to optimise, generate or link it.
class HostCompileError : public Error {
public:
    using Error::Error;
};

struct HostTarget {
    std::string triple;                 // e.g. "x86_64-pc-linux-gnu"
    std::string cpu;                    // e.g. "znver3"
    std::vector<std::string> features;  // sorted, e.g. {"+avx2", "-avx512f", ...}

    // The machine kiln runs on (CPU name and features as LLVM detects them).
    static HostTarget detect();
    // The given CPU on this machine's triple, with that CPU's default features (LLVM's names,
    // e.g. "x86-64-v3", "skylake-avx512"). Throws InvalidArgument for a CPU LLVM does not know.
    static HostTarget for_cpu(const std::string& cpu);

    std::string name() const;             // "host-<triple>-<cpu>"
    std::string feature_string() const;   // comma-joined features
    // True when code built for this target can run on `machine`: same triple, and every feature
    // this target enables is enabled on `machine`.
    bool runs_on(const HostTarget& machine) const;
};

// A host kernel translation unit: generated source plus every template header it may include.
// Only the listed headers (and clang's builtin headers) are visible to it.
struct HostKernelSource {
    std::string name;    // for messages, e.g. "moe_routing m=16 e=8"
    std::string source;  // the generated .cpp
    std::vector<std::pair<std::string, std::string>> headers;  // "host/prelude.hpp" → bytes
    std::vector<std::string> entries;                          // extern "C" symbols to resolve
    cache::ArtifactInfo columns;  // descriptor columns stored with the object (family, m, n, ...)
};

// Where compiled host objects persist (the SQLite store: host_object_cache.hpp).
class HostObjectCache {
public:
    virtual ~HostObjectCache() = default;
    // The object stored under `key`, only if it was built for `target_name`; nullopt otherwise.
    virtual std::optional<std::vector<uint8_t>> load(const cache::ContentKey& key, const std::string& target_name) = 0;
    // Stores a freshly compiled object. Failures are reported by the implementation, not thrown.
    virtual void store(const cache::Artifact& artifact) = 0;
    // Cross-process single flight while one process compiles `key` (released on destruction).
    virtual std::shared_ptr<void> lease(const cache::ContentKey& key) = 0;
};

struct HostCompileStats {
    bool memo_hit = false;    // already loaded in this process
    bool cache_hit = false;   // object came from the object cache: no clang, no codegen
    double frontend_ms = 0;   // clang: parse + IR generation
    double optimize_ms = 0;   // the O3 pipeline
    double codegen_ms = 0;    // instruction selection .. object emission
    double load_ms = 0;       // cache read + JIT link + symbol lookup
    double total_ms = 0;
    uint64_t object_bytes = 0;
};

// A loaded host kernel module; entry points stay valid as long as its compiler lives.
class HostKernelModule {
public:
    const cache::ContentKey& key() const { return key_; }
    // Address of an entry listed in the source; throws NotFound for any other name.
    void* entry(std::string_view name) const;
    const HostCompileStats& stats() const { return stats_; }

private:
    friend class HostCompiler;
    cache::ContentKey key_;
    std::map<std::string, void*, std::less<>> entries_;
    HostCompileStats stats_;
};

class HostCompiler {
public:
    struct Options {
        std::optional<HostTarget> target;  // default: HostTarget::detect()
        HostObjectCache* cache = nullptr;  // not owned; nullptr: compile every time
    };
    explicit HostCompiler(Options opts);
    ~HostCompiler();
    HostCompiler(const HostCompiler&) = delete;
    HostCompiler& operator=(const HostCompiler&) = delete;

    const HostTarget& target() const;
    bool native() const;  // the target runs on this machine
    cache::ContentKey key(const HostKernelSource& src) const;

    // Native targets only. Returns the loaded module (shared: one per key per compiler).
    std::shared_ptr<const HostKernelModule> load(const HostKernelSource& src);
    // Any target: makes sure the object is in the cache (compiling it if missing), loads nothing.
    HostCompileStats build(const HostKernelSource& src);

    // Front-end runs in this process, over all compilers.
    static uint64_t clang_invocations();
    static std::string llvm_version();  // e.g. "14.0.6"
    // The front-end options (without the builtin-header paths) that go into every key.
    std::vector<std::string> canonical_options() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::jit
