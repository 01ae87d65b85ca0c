// Where the CUDA compile-time pieces live at run time: NVRTC (libnvrtc.so.13) and the CUDA headers
// NVRTC needs (cuda_bf16.h, CCCL's cuda/std). Only compiling touches them; serving from a complete
// cache needs neither.
//
// Search order, first match wins:
//   $KILN_CUDA_HOME, $CUDA_HOME, /usr/local/cuda           (lib64/, lib/, include/, include/cccl/)
//   the system loader (NVRTC only: dlopen("libnvrtc.so.13") through LD_LIBRARY_PATH / ldconfig)
//   NVIDIA's pip wheels (nvidia/cu13/{lib,include}) in $VIRTUAL_ENV, in a .venv next to the kiln
//   executable or up to four directories above it, and in the system Python's site/dist-packages.
#pragma once

#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace kiln::jit {

// NVRTC or the headers are missing; what() says exactly what and where it looked.
class ToolkitNotFound : public Error {
public:
    using Error::Error;
};

// dlopen() candidates for NVRTC, in search order (absolute paths, and the bare soname).
std::vector<std::string> nvrtc_library_candidates();

struct CudaHeaders {
    std::string include;  // holds cuda_bf16.h
    std::string cccl;     // holds cuda/std/cstdint (include/cccl on CUDA 13)
    int cuda_version = 0; // CUDA_VERSION from include/cuda.h when present (e.g. 13000), else 0
};

// Throws ToolkitNotFound listing the directories it tried and the file it missed.
CudaHeaders locate_cuda_headers();

}  // namespace kiln::jit
