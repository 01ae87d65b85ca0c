// Shared device prelude for NVRTC-compiled kiln kernels. NVRTC has no libstdc++: fixed-width
// integer types come from CCCL's <cuda/std/cstdint>. Templates that need bf16 include <cuda_bf16.h>
// themselves (it is the largest header, so kernels that do not use it do not pay for parsing it).
#pragma once

#include <cuda/std/cstdint>

namespace kiln_dev {

using i8 = cuda::std::int8_t;
using u8 = cuda::std::uint8_t;
using i32 = cuda::std::int32_t;
using u32 = cuda::std::uint32_t;
using i64 = cuda::std::int64_t;
using u64 = cuda::std::uint64_t;

__device__ __forceinline__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Exclusive prefix sum of `v` over the CTA's threads in thread order (blockDim.x a multiple of 32).
// Every thread of the CTA calls it (two __syncthreads); `scratch` is nwarps + 1 ints of shared memory
// and holds the CTA's total at scratch[nwarps] afterwards.
__device__ __forceinline__ int block_exclusive_scan(int v, int* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int incl = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += u;
    }
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < nw ? scratch[lane] : 0;
        int wincl = w;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, wincl, d);
            if (lane >= d) wincl += u;
        }
        if (lane < nw) scratch[lane] = wincl - w;  // exclusive prefix of each warp
        if (lane == 31) scratch[nw] = wincl;
    }
    __syncthreads();
    return scratch[warp] + incl - v;
}

}  // namespace kiln_dev
