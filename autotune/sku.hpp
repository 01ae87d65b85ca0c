// The identity of the machine a tune DB was measured on (its SKU). Tuned choices are only valid on the
// SKU that measured them: a tune DB records the identity when it is created and refuses to serve another.
//
//   matching fields   kind (cuda / host), device name, SM count (host: worker threads), memory size,
//                     compile target (sm_90a, or the host target's full name)
//   recorded fields   clocks, driver and NVRTC versions, the last-level cache size, the LLVM version:
//                     they change with a software update or a boost state, not with the part, so they
//                     are kept for diagnostics and printed by `kiln tune show`, never compared.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend.hpp"

namespace kiln::autotune {

struct SkuIdentity {
    std::string kind;            // "cuda" or "host"
    std::string name;            // "NVIDIA H200"; the host's CPU model name
    int compute_units = 0;       // SMs, or host worker threads
    uint64_t memory_bytes = 0;   // device memory; the host's physical memory
    std::string target;          // "sm_90a", or "host-<triple>-<cpu>"
    // recorded only
    int clock_khz = 0;           // SM clock; the host's nominal clock when known
    uint64_t cache_bytes = 0;    // L2; the host's last-level cache
    std::string driver;          // CUDA driver version, "" on the host
    std::string nvrtc;           // NVRTC version, "" when absent
    std::string llvm;            // LLVM version of the host JIT, "" without one

    // The matching fields as one line, e.g. "cuda NVIDIA H200, 132 SMs, 140 GiB, sm_90a".
    std::string summary() const;
    // "" when `other` is the same SKU, else which matching field differs and both values.
    std::string difference(const SkuIdentity& other) const;
};

// The SKU of `backend`: the CUDA device it runs on (its ordinal from the driver's first device the
// backend names), or the host target. `device` is the CUDA ordinal for a CUDA backend.
SkuIdentity detect_sku(const runtime::Backend& backend, int device = 0);
// The host target of this machine with `threads` workers (the host backend's compute units).
SkuIdentity host_sku(int threads);
// CUDA device `ordinal`; throws NoDevice without a driver.
SkuIdentity cuda_sku(int ordinal);

}  // namespace kiln::autotune
