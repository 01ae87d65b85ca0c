// CK(call): a CUDA runtime call that must succeed; otherwise the call, the place and the error go to
// stderr and the process exits with status 3.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                                   \
    do {                                                                                                        \
        cudaError_t err_ = (x);                                                                                 \
        if (err_ != cudaSuccess) {                                                                              \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(err_)); \
            std::exit(3);                                                                                       \
        }                                                                                                       \
    } while (0)
