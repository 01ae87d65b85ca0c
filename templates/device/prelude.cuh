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

}  // namespace kiln_dev
