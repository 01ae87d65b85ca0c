// mla_cache_append: each new token's (ĉ, k_rope) row into its page slot (templates/common/
// mla_cache_append_params.h). Grid-stride over tokens, one 16-byte chunk per thread and step; the launch
// checks that rows, strides and the page layout are 16-byte aligned.
#pragma once

#include <cuda_bf16.h>

#include "device/mla_common.cuh"
#include "common/mla_cache_append_params.h"

namespace kiln_dev {
namespace mla {

constexpr int kAppendThreads = 128;

__global__ void __launch_bounds__(kAppendThreads) mla_cache_append(const kiln_params::mla::CacheAppendParams p) {
    const int lat_chunks = p.d_c / 8, chunks = (p.d_c + p.d_r) / 8;
    const int row_bytes = (p.d_c + p.d_r) * 2;
    for (int t = blockIdx.x; t < p.idx.num_tokens; t += gridDim.x) {
        const int s = __ldg(p.idx.token_seq + t), pos = __ldg(p.idx.token_pos + t);
        uint4* row = reinterpret_cast<uint4*>(const_cast<char*>(cache_row(p.idx, p.layer_offset, row_bytes, s, pos)));
        for (int c = threadIdx.x; c < chunks; c += kAppendThreads) {
            const uint4* src = c < lat_chunks
                                   ? reinterpret_cast<const uint4*>(p.latent + static_cast<long long>(t) * p.latent_stride) + c
                                   : reinterpret_cast<const uint4*>(p.k_rope + static_cast<long long>(t) * p.rope_stride) +
                                         (c - lat_chunks);
            row[c] = __ldg(src);
        }
    }
}

}  // namespace mla
}  // namespace kiln_dev
