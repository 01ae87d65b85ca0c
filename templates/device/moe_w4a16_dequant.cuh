// moe_w4a16 dequant (sm_90): expands one expert matrix from the kernel layout "mma16" to bf16 rows
// [n_pad, k_pad] in layout row order, with exactly the fused dequantisation the GEMMs use. Used to
// prove the fused path bit-identical to the unfused form, and to inspect prepared weights.
// One warp per (super-block, k64) record and row-block; grid-stride.
#pragma once

#include "device/moe_w4a16_common.cuh"
#include "common/moe_w4a16_dequant_params.h"

namespace kiln_dev {
namespace moe {

using kiln_params::moe::DequantParams;

// kBlocks: row-blocks per super-block of the layout (8 for decode_mma16, 4 for prefill_mma16).
template <int kFormat, bool kWideScale, int kBlocks>
__global__ void __launch_bounds__(256) moe_w4a16_dequant(const DequantParams p) {
    using LB = LayoutBytes<kFormat, kBlocks>;
    constexpr int kRec = LB::kRecordBytes;
    constexpr int kScB = LB::kScaleBytesPerBlock;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int q_count = p.k_pad / 64;
    const int jobs = (p.n_pad / 16) * q_count;  // (row-block, k64)
    for (int job = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; job < jobs; job += (gridDim.x * blockDim.x) >> 5) {
        const int rb = job / q_count, q = job % q_count;
        const int sb = rb / kBlocks, w = rb % kBlocks;
        const u8* rec = p.weights + static_cast<u64>(sb * q_count + q) * kRec;
        const uint4 wv = *reinterpret_cast<const uint4*>(rec + w * 512 + lane * 16);
        uint2 sv;
        if constexpr (kFormat == kFormatInt4) {
            sv = *reinterpret_cast<const uint2*>(rec + LB::kWeightBytes + w * kScB + g * 8);
        } else {
            sv.x = *reinterpret_cast<const u32*>(rec + LB::kWeightBytes + w * kScB + g * 4);
            sv.y = 0;
        }
        u32 m[4];
        expand_scales<kFormat, kWideScale>(sv, m);
        const u32 words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            u32 a[4];
            dequant_word<kFormat, kWideScale>(words[s], m[(s >> 1) * 2], m[(s >> 1) * 2 + 1], a);
            const int k = q * 64 + 16 * s + 2 * t;
            const int row = rb * 16 + g;
            u32* o0 = reinterpret_cast<u32*>(p.out + static_cast<long long>(row) * p.k_pad + k);
            u32* o1 = reinterpret_cast<u32*>(p.out + static_cast<long long>(row + 8) * p.k_pad + k);
            o0[0] = a[0];
            o1[0] = a[1];
            o0[4] = a[2];  // k + 8
            o1[4] = a[3];
        }
    }
}

}  // namespace moe
}  // namespace kiln_dev
