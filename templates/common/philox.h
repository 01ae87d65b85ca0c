// The sampler's counter-based random numbers, one definition for the device kernel, the host kernel and
// kiln's own tests: Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011) on the counter (token, 0, step low, step high) under the key (seed low, seed high). The same
// (seed, step, token) gives the same number everywhere, independent of launch geometry.
#pragma once

#include "common/kiln_params.h"

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define KILN_PHILOX_FN __device__ __forceinline__
#else
#define KILN_PHILOX_FN inline
#endif

namespace kiln_params {

// The first output word of Philox4x32-10.
KILN_PHILOX_FN u32 philox4x32_10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
    for (int r = 0; r < 10; ++r) {
        const u64 p0 = static_cast<u64>(0xD2511F53u) * c0, p1 = static_cast<u64>(0xCD9E8D57u) * c2;
        const u32 n0 = static_cast<u32>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<u32>(p0 >> 32) ^ c3 ^ k1;
        c1 = static_cast<u32>(p1);
        c3 = static_cast<u32>(p0);
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c0;
}

// Uniform in the open interval (0, 1): 23 random bits plus one half, exact in fp32.
KILN_PHILOX_FN float sample_uniform(u64 seed, u64 step, u32 token) {
    const u32 x = philox4x32_10(token, 0u, static_cast<u32>(step), static_cast<u32>(step >> 32), static_cast<u32>(seed),
                                static_cast<u32>(seed >> 32));
    return (static_cast<float>(x >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace kiln_params
