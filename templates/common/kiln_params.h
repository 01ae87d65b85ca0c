// Parameter structs of kernel families are defined once, in templates/common/<family>_params.h, and compiled
// by three compilers: NVRTC (device templates), the in-process clang (host templates) and kiln's own C++
// compiler (which fills them). This header gives all three the same element types:
//   i32, u32, i64, u64, u8, u16  fixed-width integers
//   bf16                         __nv_bfloat16 on the device, its 16-bit pattern elsewhere
//   i32x2                        int2 on the device, a pair of i32 elsewhere
// and the layout checks every params header ends with (size and field offsets, asserted by all three).
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
// Device: the template includes device/prelude.cuh (CCCL's fixed-width types) first, and <cuda_bf16.h> when it
// reads bf16 values (a declaration is enough for the pointers here).
struct __nv_bfloat16;
namespace kiln_params {
using i32 = cuda::std::int32_t;
using u32 = cuda::std::uint32_t;
using i64 = cuda::std::int64_t;
using u64 = cuda::std::uint64_t;
using u8 = cuda::std::uint8_t;
using u16 = cuda::std::uint16_t;
using bf16 = __nv_bfloat16;
using i32x2 = int2;
}  // namespace kiln_params
#elif defined(KILN_HOST_KERNEL)
// Host kernels: host/prelude.hpp defines the fixed-width types without any system header.
namespace kiln_params {
using i32 = int32_t;
using u32 = uint32_t;
using i64 = int64_t;
using u64 = uint64_t;
using u8 = uint8_t;
using u16 = uint16_t;
using bf16 = uint16_t;
struct i32x2 {
    i32 x, y;
};
}  // namespace kiln_params
#else
#include <cstdint>
namespace kiln_params {
using i32 = std::int32_t;
using u32 = std::uint32_t;
using i64 = std::int64_t;
using u64 = std::uint64_t;
using u8 = std::uint8_t;
using u16 = std::uint16_t;
using bf16 = std::uint16_t;
struct i32x2 {
    i32 x, y;
};
}  // namespace kiln_params
#endif

// NVRTC has no __builtin_offsetof (nor a constant offsetof): its front end's own primitive, __INTADDR__, is one.
#if defined(__CUDACC_RTC__)
#define KILN_PARAMS_OFFSETOF(T, field) ((unsigned long long)__INTADDR__(&(((T*)0)->field)))
#else
#define KILN_PARAMS_OFFSETOF(T, field) __builtin_offsetof(T, field)
#endif
#define KILN_PARAMS_SIZE(T, bytes) static_assert(sizeof(T) == (bytes), #T ": size of the shared parameter block")
#define KILN_PARAMS_OFFSET(T, field, at) \
    static_assert(KILN_PARAMS_OFFSETOF(T, field) == (at), #T "." #field ": offset in the shared parameter block")
