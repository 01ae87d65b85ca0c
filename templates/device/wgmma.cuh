// Warpgroup MMA (sm_90a) wrappers: wgmma.mma_async with the A operand in registers (the m16n8k16 A
// fragment layout per warp, warp w of the warpgroup supplying rows 16w..16w+15) and B from shared memory
// through a matrix descriptor; fp32 accumulators in the m16n8 accumulator order, n/8 groups of four
// (d[4j+0]: row g, col 8j+2t; +1: col 8j+2t+1; +2: row g+8, col 8j+2t; +3: row g+8, col 8j+2t+1).
// Only sm_90a has these instructions; the generated source includes this header for that target only.
#pragma once

#include "device/prelude.cuh"

namespace kiln_dev {
namespace wgmma {

// K-major descriptor with the 128-byte swizzle: rows of 128 bytes, 8-row atoms of 1024 bytes (the atom
// 1024-byte aligned), chunk c of row r stored at chunk c ^ (r % 8). Advancing K by 16 bf16 inside a row
// adds 32 bytes to the start address; the leading offset is unused.
__device__ __forceinline__ u64 desc_sw128(u32 saddr) {
    return static_cast<u64>((saddr & 0x3FFFFu) >> 4) | (static_cast<u64>(1) << 16) | (static_cast<u64>(1024 >> 4) << 32) |
           (static_cast<u64>(1) << 62);
}

// Orders this thread's earlier register writes (A fragments, accumulators) before the next wgmma.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the accumulators in registers across asynchronous wgmma (no reads or writes by the compiler).
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x N] = A (d: N / 2 accumulators, indexed with constants only)[64 x 16] (registers, bf16) * B[16 x N] (shared memory, bf16, K-major)
// + (scale_d ? D : 0), fp32 D.
template <int N>
struct MmaRS;

template <>
struct MmaRS<16> {
    __device__ __forceinline__ static void run(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 b, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(scale_d));
    }
};

template <>
struct MmaRS<32> {
    __device__ __forceinline__ static void run(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 b, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(scale_d));
    }
};

template <>
struct MmaRS<48> {
    __device__ __forceinline__ static void run(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 b, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, %27}, %28, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(scale_d));
    }
};

template <>
struct MmaRS<64> {
    __device__ __forceinline__ static void run(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 b, int scale_d) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(scale_d));
    }
};

}  // namespace wgmma
}  // namespace kiln_dev
