// A kernel the dispatcher has loaded: its descriptor, content key, the library that owns the code and
// the kernel handle. Owned by the Dispatcher and valid for its lifetime; family launch helpers take it.
// Host-target kernels (desc.target.is_host()) have no library: host_entry is the JIT-compiled entry
// point (runtime/host_kernel_abi.h) and host_scratch_bytes the scratch memory a launch provides.
#pragma once

#include <cstdint>

#include "cache/content_key.hpp"
#include "jit/descriptor.hpp"
#include "runtime/host_kernel_abi.h"
#include "runtime/library.hpp"

namespace kiln::jit {

struct LoadedKernel {
    KernelDescriptor desc;
    cache::ContentKey key;
    runtime::Library library;
    runtime::Kernel kernel;
    uint32_t dynamic_smem = 0;  // bytes of dynamic shared memory opted into at load
    kiln_host_entry host_entry = nullptr;  // host target only
    uint64_t host_scratch_bytes = 0;       // host target only
};

}  // namespace kiln::jit
