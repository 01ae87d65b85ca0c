// A kernel the dispatcher has loaded: its descriptor, content key, the library that owns the code and
// the kernel handle. Owned by the Dispatcher and valid for its lifetime; family launch helpers take it.
// Host-target kernels (desc.target.is_host()) have no library: host_entry is the JIT-compiled entry
// point (runtime/host/kernel_abi.h) and host_scratch_bytes the scratch memory a launch provides.
#pragma once

#include <cstdint>
#include <string>

#include "cache/content_key.hpp"
#include "jit/descriptor.hpp"
#include "runtime/host/kernel_abi.h"
#include "runtime/backend.hpp"
#include "runtime/cuda/library.hpp"

namespace kiln::jit {

struct LoadedKernel {
    KernelDescriptor desc;
    cache::ContentKey key;
    runtime::Library library;
    runtime::Kernel kernel;
    uint32_t dynamic_smem = 0;  // bytes of dynamic shared memory opted into at load
    kiln_host_entry host_entry = nullptr;  // host target only
    uint64_t host_scratch_bytes = 0;       // host target only
    std::string name;                      // the descriptor's text, for messages
    runtime::KernelHandle handle;          // what Stream::launch takes (set by finish())

    // Fills name and handle from the fields above; the loaders call it last.
    void finish() {
        name = to_string(desc);
        handle.kind = desc.target.is_host() ? runtime::BackendKind::host : runtime::BackendKind::cuda;
        handle.cuda = kernel.handle();
        handle.host = host_entry;
        handle.host_scratch_bytes = host_scratch_bytes;
        handle.name = name.c_str();
    }
};

}  // namespace kiln::jit
