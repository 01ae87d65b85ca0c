// Streaming ceilings for the decode pipeline: how fast can persistent warp groups read weights through
// bulk async copies (the fused decode kernel's producer pattern, no math), against plain LDG.128 reads?
// Each warp group owns a ring of `stages` shared-memory stages; its lane 0 claims items (contiguous
// regions of item_bytes, or the same chunks interleaved across items: "sweep") and keeps the ring full.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -I templates -o stream_bench scripts/microbench/stream_bench.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"
#include "device/moe_w4a16_common.cuh"

using namespace kiln_dev::moe;
using kiln_dev::u32;
using kiln_dev::u64;

struct Args {
    const unsigned char* base;
    long long total;     // bytes read per launch
    int item_bytes;
    int stage_bytes;
    int stages;
    int copies;          // bulk copies per stage
    int sweep;           // 0: items contiguous; 1: chunk c of item i at (c * items + i) * stage_bytes
    int evict_first;
    int* work;
};

__global__ void stream_bulk(const Args a) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int groups = blockDim.x >> 5;
    const u32 ring = smem_addr(smem) + warp * a.stages * a.stage_bytes;
    const u32 bars = smem_addr(smem) + groups * a.stages * a.stage_bytes + warp * 8 * a.stages;
    if (lane != 0) return;
    for (int s = 0; s < a.stages; ++s) mbar_init(bars + 8 * s, 1);
    fence_mbar_init();
    const u64 policy = evict_first_policy();
    const long long items = a.total / a.item_bytes;
    const int chunks = a.item_bytes / a.stage_bytes;
    const int per_copy = a.stage_bytes / a.copies;
    long long issued = 0;
    for (long long it = atomicAdd(a.work, 1); it < items; it = atomicAdd(a.work, 1)) {
        for (int c = 0; c < chunks; ++c) {
            const int slot = static_cast<int>(issued % a.stages);
            if (issued >= a.stages) mbar_wait(bars + 8 * slot, static_cast<u32>((issued / a.stages - 1) & 1));
            const unsigned char* src = a.sweep ? a.base + (static_cast<long long>(c) * items + it) * a.stage_bytes
                                               : a.base + it * a.item_bytes + static_cast<long long>(c) * a.stage_bytes;
            mbar_arrive_expect_tx(bars + 8 * slot, a.stage_bytes);
            for (int j = 0; j < a.copies; ++j) {
                if (a.evict_first)
                    bulk_g2s_hint(ring + slot * a.stage_bytes + j * per_copy, src + j * per_copy, per_copy, bars + 8 * slot, policy);
                else
                    bulk_g2s(ring + slot * a.stage_bytes + j * per_copy, src + j * per_copy, per_copy, bars + 8 * slot);
            }
            ++issued;
        }
    }
    for (long long j = issued > a.stages ? issued - a.stages : 0; j < issued; ++j)
        mbar_wait(bars + 8 * (j % a.stages), static_cast<u32>((j / a.stages) & 1));
}

__global__ void stream_ldg(const uint4* p, long long n, unsigned* sink) {
    unsigned x = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p + i));
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x12345678u) *sink = x;
}

int main(int argc, char** argv) {
    const long long total = 1189LL << 20;  // bytes per launch (K2 EP8 decode 20 touches 1,189 MB)
    const int rot = 5;
    const long long buf_bytes = total * rot + (64LL << 20);
    unsigned char* buf;
    CK(cudaMalloc(&buf, buf_bytes));
    CK(cudaMemset(buf, 0x5a, buf_bytes));
    int* work;
    unsigned* sink;
    CK(cudaMalloc(&work, 4));
    CK(cudaMalloc(&sink, 4));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int iters = 15;
    auto time_it = [&](auto&& launch, long long bytes) {
        std::vector<float> ms;
        for (int i = 0; i < iters + 2; ++i) {
            CK(cudaMemsetAsync(work, 0, 4));
            CK(cudaEventRecord(e0));
            launch(buf + (i % rot) * total);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            if (i >= 2) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        const double us = ms[ms.size() / 2] * 1e3;
        return std::make_pair(us, bytes / us / 1e6);
    };
    {
        const long long n = total / 16;
        for (int threads : {512, 1024}) {
            auto r = time_it([&](unsigned char* b) { stream_ldg<<<sms * (2048 / threads), threads>>>((const uint4*)b, n, sink); }, total);
            std::printf("ldg        threads %4d x %d/SM                      %8.1f us %6.3f TB/s\n", threads, 2048 / threads, r.first, r.second);
        }
    }
    struct Cfg { int groups, stage, stages, item, copies, sweep, ef; };
    std::vector<Cfg> cfgs = {
        {4, 9216, 5, 516096, 1, 0, 1},   // the fused kernel's K2 ring: 2 records of 4,608 B, 5 stages
        {4, 9216, 5, 516096, 1, 0, 0},
        {4, 9216, 5, 516096, 1, 1, 1},   // sweep: concurrent groups read neighbouring chunks
        {4, 9216, 5, 147456, 1, 0, 1},   // down items (147 KB)
        {4, 9216, 2, 516096, 1, 0, 1},
        {4, 9216, 3, 516096, 1, 0, 1},
        {4, 4608, 10, 516096, 1, 0, 1},
        {4, 18432, 2, 516096, 1, 0, 1},
        {4, 18432, 3, 516096, 1, 0, 1},
        {4, 9216, 5, 516096, 4, 0, 1},   // four copies per stage
        {8, 9216, 2, 516096, 1, 0, 1},
        {8, 9216, 3, 516096, 1, 0, 1},
        {2, 9216, 10, 516096, 1, 0, 1},
        {1, 9216, 20, 516096, 1, 0, 1},
        {1, 36864, 5, 516096, 1, 0, 1},
    };
    if (argc > 1) {  // configurations "groups,stage,stages,item,copies,sweep,evict_first" replace the defaults
        cfgs.clear();
        for (int i = 1; i < argc; ++i) {
            Cfg c{};
            if (std::sscanf(argv[i], "%d,%d,%d,%d,%d,%d,%d", &c.groups, &c.stage, &c.stages, &c.item, &c.copies, &c.sweep,
                            &c.ef) != 7) {
                std::fprintf(stderr, "bad configuration '%s' (groups,stage,stages,item,copies,sweep,evict_first)\n", argv[i]);
                return 2;
            }
            cfgs.push_back(c);
        }
    }
    for (const Cfg& c : cfgs) {
        const int smem = c.groups * c.stages * c.stage + c.groups * 8 * c.stages;
        CK(cudaFuncSetAttribute(stream_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        const long long bytes = total / c.item * c.item;
        auto r = time_it(
            [&](unsigned char* b) {
                Args a{b, bytes, c.item, c.stage, c.stages, c.copies, c.sweep, c.ef, work};
                stream_bulk<<<sms, 32 * c.groups, smem>>>(a);
            },
            bytes);
        std::printf("bulk groups %d stage %6d x %2d (%3d KB/group) item %6d copies %d %s %s %8.1f us %6.3f TB/s\n", c.groups,
                    c.stage, c.stages, c.stage * c.stages / 1024, c.item, c.copies, c.sweep ? "sweep" : "items",
                    c.ef ? "ef" : "  ", r.first, r.second);
    }
    return 0;
}
