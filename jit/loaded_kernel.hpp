// A kernel the dispatcher has loaded: its descriptor, content key, the library that owns the code and
// the kernel handle. Owned by the Dispatcher and valid for its lifetime; family launch helpers take it.
#pragma once

#include <cstdint>

#include "cache/content_key.hpp"
#include "jit/descriptor.hpp"
#include "runtime/library.hpp"

namespace kiln::jit {

struct LoadedKernel {
    KernelDescriptor desc;
    cache::ContentKey key;
    runtime::Library library;
    runtime::Kernel kernel;
    uint32_t dynamic_smem = 0;  // bytes of dynamic shared memory opted into at load
};

}  // namespace kiln::jit
