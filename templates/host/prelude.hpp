// Shared prelude for host kernels, compiled by kiln's in-process clang (C++17). No libstdc++ and no
// system headers; the prelude itself needs no header at all (fixed-width types come from the
// compiler's predefined macros), so host kernels compile wherever libclang-cpp runs, even without
// clang's builtin header directory. The kiln_host_ctx layout must match runtime/host/kernel_abi.h
// (same KILN_HOST_ABI_VERSION).
#pragma once

// Parameter headers (templates/common/) pick the host kernels' types with this.
#define KILN_HOST_KERNEL 1

typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;

#define KILN_HOST_ABI_VERSION 1

extern "C" {
typedef void (*kiln_host_range_fn)(void* arg, int64_t begin, int64_t end);
typedef struct kiln_host_ctx {
    uint32_t abi_version;
    uint32_t num_threads;
    void* pool;
    void (*parallel_for)(void* pool, int64_t n, int64_t grain, kiln_host_range_fn fn, void* arg);
    int32_t* status;
    void* scratch;
    uint64_t scratch_bytes;
} kiln_host_ctx;
}

// Every entry point starts with this: a context of another ABI version, or a scratch buffer
// smaller than the kernel needs, is refused (status 1 or 2), never misread.
#define KILN_HOST_ENTRY_GUARD(ctx, scratch_needed)                     \
    do {                                                               \
        if ((ctx)->abi_version != KILN_HOST_ABI_VERSION) {             \
            if ((ctx)->status) *(ctx)->status = 1;                     \
            return;                                                    \
        }                                                              \
        if ((ctx)->scratch_bytes < (uint64_t)(scratch_needed)) {       \
            if ((ctx)->status) *(ctx)->status = 2;                     \
            return;                                                    \
        }                                                              \
    } while (0)

namespace kiln_host {

using i8 = int8_t;
using u8 = uint8_t;
using u16 = uint16_t;
using i32 = int32_t;
using u32 = uint32_t;
using i64 = int64_t;
using u64 = uint64_t;

constexpr i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }
constexpr i64 min(i64 a, i64 b) { return a < b ? a : b; }
constexpr i64 max(i64 a, i64 b) { return a > b ? a : b; }

// Runs body(begin, end) over [0, n) on the executor's thread pool (grain <= 0: pool decides).
template <typename F>
inline void parallel_for(const kiln_host_ctx* ctx, i64 n, i64 grain, F& body) {
    ctx->parallel_for(
        ctx->pool, n, grain, [](void* a, int64_t b, int64_t e) { (*static_cast<F*>(a))(b, e); }, &body);
}

// bf16 <-> fp32 (bf16 is the top half of an fp32; round to nearest even, NaN stays NaN).
inline float bf16_to_f32(u16 v) {
    u32 u = static_cast<u32>(v) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
inline u16 f32_to_bf16(float f) {
    u32 u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<u16>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<u16>(u >> 16);
}

}  // namespace kiln_host
