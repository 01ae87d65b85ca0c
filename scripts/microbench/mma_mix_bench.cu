// What bounds the decode consumers' main loop when an m-block has more than one token tile: the
// dequantisation (integer ALU and FMA-heavy pipes) or the tensor pipe? Each of 16 consumer warps per
// SM (one CTA of 512 threads per SM, as the fused decode kernel) runs the loop body of one weight word
// per k16 step from shared memory, with no global traffic, and the bench reports SM cycles per word
// and the weight rate the consumers could sustain. Loop bodies (per weight word of a warp):
//   dequant      load_block + dequant_word only (two LOP3 per word fold the dequantised words into a
//                checksum, so the work is not dead)
//   mma1, mma2   dequant + one or two mma.sync m16n8k16 (token tiles on N; B from ldmatrix per record)
//   mma2only     two mma.sync per word on fixed A fragments (no dequantisation)
//   wgmma16      dequant + one wgmma.m64n16k16 per warpgroup (A from the four warps' registers, B from
//                shared memory, one group in flight): two token tiles in one warpgroup instruction
//   wgmma8       the same with wgmma.m64n8k16 (one token tile)
// Caveat: each warp's mma.sync here feeds one accumulator chain and the warps move in
// step, so the mma rows overstate the kernel's cost (the fused kernel streams more than the one-tile row's
// ceiling); a wgmma consumer built on these numbers was 6-14% slower in the kernel.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates -o mma_mix_bench \
//        scripts/microbench/mma_mix_bench.cu
// Run:   ./mma_mix_bench [records per warp, default 4096]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"
#include "device/moe_w4a16_common.cuh"
#include "device/wgmma.cuh"

using namespace kiln_dev::moe;
using kiln_dev::u32;
using kiln_dev::u64;

enum Mode : int { kDequant = 0, kMma1, kMma2, kMma2Only, kWgmma16, kWgmma8 };
const char* const kModeNames[] = {"dequant", "mma1", "mma2", "mma2only", "wgmma16", "wgmma8"};

// wgmma.m64n8k16 with A from registers (device/wgmma.cuh has N >= 16 only)
__device__ __forceinline__ void mma_rs_n8(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

constexpr int kThreads = 512;
constexpr int kRecs = 8;  // records (k64 x one row-block) each warp cycles through in shared memory
// per warp: kRecs records of weights (512 B) + scales (64 B) at a 1 KB stride (addresses by shifts, as
// the kernel's ring slots); per group: a 16-token x 64 tile per record
constexpr int kWarpBytes = kRecs * 1024;
constexpr int kGroupTileBytes = kRecs * 16 * 128;
constexpr int kSmem = 16 * kWarpBytes + 4 * kGroupTileBytes;

template <int kFormat, int kMode>
__global__ void __launch_bounds__(kThreads, 1) mix(int records, float* out, long long* cycles) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, group = warp >> 2;
    // random-looking weights and scales (finite bf16 / e8m0), small token values
    for (int i = tid; i < kSmem / 4; i += kThreads) {
        u32 v = (i * 2654435761u) ^ (i >> 3) ^ 0x9e3779b9u;
        if (i * 4 >= 16 * kWarpBytes) v = 0x3c003c00u;  // tokens: bf16 1/128-ish
        else if ((i * 4) % 1024 >= 512) v = kFormat == kFormatInt4 ? 0x3c003c00u : 0x7f7f7f7fu;  // scales
        reinterpret_cast<u32*>(smem)[i] = v;
    }
    __syncthreads();
    const u32 wbase = smem_addr(smem + warp * kWarpBytes);
    const u32 tbase = smem_addr(smem + 16 * kWarpBytes + group * kGroupTileBytes);
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    u32 fixed[4] = {0x3f803f80u ^ lane, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
    u32 ab[4][4];  // the four k16 steps' A fragments (wgmma: intact while their groups are in flight)
    u32 sink = 0;
    const long long t0 = clock64();
#pragma unroll 1
    for (int r = 0; r < records; ++r) {
        const int rec = r & (kRecs - 1);
        const u32 w_addr = wbase + (rec << 10) + lane * 16;
        const u32 s_addr = wbase + (rec << 10) + 512 + (lane >> 2) * (kFormat == kFormatInt4 ? 8 : 4);
        u32 words[4], m[4];
        if constexpr (kMode != kMma2Only) load_block<kFormat, false>(w_addr, s_addr, words, m);
        u32 b[2][4];
        if constexpr (kMode == kMma1 || kMode == kMma2 || kMode == kMma2Only) {
            // B fragments of one or two 8-token tiles for the record's four k16 steps (ldmatrix x4 each)
            const u32 row = tbase + rec * 2048 + (lane & 15) * 128 + (lane >> 4) * 16;
            ldmatrix_x4(row, b[0][0], b[0][1], b[0][2], b[0][3]);
            if constexpr (kMode != kMma1) ldmatrix_x4(row + 64, b[1][0], b[1][1], b[1][2], b[1][3]);
        }
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            u32(&a)[4] = ab[s];
            if constexpr (kMode == kMma2Only) {
                a[0] = fixed[0], a[1] = fixed[1], a[2] = fixed[2], a[3] = fixed[3];
            } else {
                dequant_word<kFormat, false>(words[s], m[(s >> 1) * 2], m[(s >> 1) * 2 + 1], a);
            }
            if constexpr (kMode == kDequant) {
                sink ^= a[0] ^ a[1] ^ a[2] ^ a[3];
            } else if constexpr (kMode == kMma1) {
                float (&c)[4] = *reinterpret_cast<float(*)[4]>(acc);
                mma_bf16_16816(c, a[0], a[1], a[2], a[3], b[0][s & 1 ? 2 : 0], b[0][s & 1 ? 3 : 1]);
            } else if constexpr (kMode == kMma2 || kMode == kMma2Only) {
                float (&c0)[4] = *reinterpret_cast<float(*)[4]>(acc);
                float (&c1)[4] = *reinterpret_cast<float(*)[4]>(acc + 4);
                mma_bf16_16816(c0, a[0], a[1], a[2], a[3], b[0][s & 1 ? 2 : 0], b[0][s & 1 ? 3 : 1]);
                mma_bf16_16816(c1, a[0], a[1], a[2], a[3], b[1][s & 1 ? 2 : 0], b[1][s & 1 ? 3 : 1]);
            } else {
                const u64 desc = kiln_dev::wgmma::desc_sw128(tbase + rec * 2048) + 2 * s;
                kiln_dev::wgmma::fence_acc(acc);
                kiln_dev::wgmma::fence();
                if constexpr (kMode == kWgmma16)
                    kiln_dev::wgmma::MmaRS<16>::run(acc, ab[s][0], ab[s][1], ab[s][2], ab[s][3], desc, 1);
                else
                    mma_rs_n8(acc, ab[s][0], ab[s][1], ab[s][2], ab[s][3], desc);
                kiln_dev::wgmma::commit();
                kiln_dev::wgmma::wait<1>();
                kiln_dev::wgmma::fence_acc(acc);
            }
        }
    }
    if constexpr (kMode == kWgmma16 || kMode == kWgmma8) {
        kiln_dev::wgmma::wait<0>();
        kiln_dev::wgmma::fence_acc(acc);
    }
    const long long t1 = clock64();
    float sum = __int_as_float(sink & 0x3f7fffffu);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += acc[j];
    out[blockIdx.x * kThreads + tid] = sum;
    if (lane == 0) cycles[blockIdx.x * 16 + warp] = t1 - t0;
}

template <int kFormat, int kMode>
void run(int records, int sms, float* out, long long* cycles, double clock_ghz) {
    auto k = mix<kFormat, kMode>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    k<<<sms, kThreads, kSmem>>>(records, out, cycles);  // warm-up
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    k<<<sms, kThreads, kSmem>>>(records, out, cycles);
    CK(cudaEventRecord(e1));
    CK(cudaDeviceSynchronize());
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    std::vector<long long> c(static_cast<size_t>(sms) * 16);
    CK(cudaMemcpy(c.data(), cycles, c.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    long long mx = 0;
    for (long long v : c) mx = v > mx ? v : mx;
    const double words = 4.0 * records;                 // per warp
    const double cyc_per_word = mx / words;              // SM cycles per word, 16 warps in parallel
    const double bytes_per_clk = 16 * 32 * 4 / cyc_per_word;  // packed weight bytes per SM cycle
    // the weight rate of all SMs at the clock the events imply (cycles / elapsed time)
    const double ghz = mx / (ms * 1e6);
    std::printf("%-6s %-9s %8.2f SM cycles/word  %7.1f B/SM-cycle  %6.2f TB/s at %.2f GHz x %d SMs  (%.2f TB/s at %.2f GHz)\n",
                kFormat == kFormatInt4 ? "int4" : "mxfp4", kModeNames[kMode], cyc_per_word, bytes_per_clk,
                bytes_per_clk * ghz * 1e9 * sms / 1e12, ghz, sms, bytes_per_clk * clock_ghz * 1e9 * sms / 1e12,
                clock_ghz);
}

int main(int argc, char** argv) {
    const int records = argc > 1 ? std::atoi(argv[1]) : 4096;
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    float* out;
    long long* cycles;
    CK(cudaMalloc(&out, static_cast<size_t>(sms) * kThreads * sizeof(float)));
    CK(cudaMalloc(&cycles, static_cast<size_t>(sms) * 16 * sizeof(long long)));
    const double clock_ghz = 1.98;
    std::printf("%s, %d SMs; 16 consumer warps per SM, %d records (4 words each) per warp\n", prop.name, sms, records);
    run<kFormatInt4, kDequant>(records, sms, out, cycles, clock_ghz);
    run<kFormatInt4, kMma1>(records, sms, out, cycles, clock_ghz);
    run<kFormatInt4, kMma2>(records, sms, out, cycles, clock_ghz);
    run<kFormatInt4, kMma2Only>(records, sms, out, cycles, clock_ghz);
    run<kFormatInt4, kWgmma8>(records, sms, out, cycles, clock_ghz);
    run<kFormatInt4, kWgmma16>(records, sms, out, cycles, clock_ghz);
    run<kFormatMxfp4, kDequant>(records, sms, out, cycles, clock_ghz);
    run<kFormatMxfp4, kMma1>(records, sms, out, cycles, clock_ghz);
    run<kFormatMxfp4, kMma2>(records, sms, out, cycles, clock_ghz);
    run<kFormatMxfp4, kWgmma16>(records, sms, out, cycles, clock_ghz);
    CK(cudaFree(out));
    CK(cudaFree(cycles));
    return 0;
}
