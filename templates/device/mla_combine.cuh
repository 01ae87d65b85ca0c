// mla_combine: the context pieces of the MLA attention merged for tokens with more than one
// (templates/common/mla_combine_params.h). One CTA of 128 threads per (token, head) row, 4 latent columns per
// thread and step; every thread recomputes the piece weights (at most 64 pieces).
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"
#include "common/mla_combine_params.h"

namespace kiln_dev {
namespace mla {

constexpr int kCombineThreads = 128;

__global__ void __launch_bounds__(kCombineThreads) mla_combine(const kiln_params::mla::CombineParams p) {
    const long long rows = static_cast<long long>(p.num_tokens) * p.heads;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const int t = static_cast<int>(r / p.heads);
        const int pieces = (__ldg(p.token_pos + t) + p.split_keys) / p.split_keys;
        if (pieces < 2) continue;
        const float* lse = p.part_lse + r * p.splits;
        float mx = -1.0e30f;
        for (int i = 0; i < pieces; ++i) mx = fmaxf(mx, __ldg(lse + i));
        float sum = 0.f;
        for (int i = 0; i < pieces; ++i) sum += __expf(__ldg(lse + i) - mx);
        const float inv = 1.0f / sum;
        for (int c = 4 * threadIdx.x; c < p.d_c; c += 4 * kCombineThreads) {
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int i = 0; i < pieces; ++i) {
                const float w = __expf(__ldg(lse + i) - mx);
                const float4 v = __ldg(reinterpret_cast<const float4*>(p.part_o + (r * p.splits + i) * p.d_c + c));
                acc.x += w * v.x;
                acc.y += w * v.y;
                acc.z += w * v.z;
                acc.w += w * v.w;
            }
            __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(p.out + r * p.d_c + c);
            o[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
            o[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
        }
    }
}

}  // namespace mla
}  // namespace kiln_dev
