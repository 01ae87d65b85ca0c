// Embedding gather with the feed map (contract: templates/common/embedding_params.h). One CTA of
// kThreads per token row: thread 0 resolves the id (the feed map is scanned; it holds one entry per fed
// sequence), then the row is copied in 16-byte pieces (dim % 8 == 0, 16-byte aligned rows).
#pragma once

#include "device/dense_common.cuh"
#include "common/embedding_params.h"

namespace kiln_dev {

template <int kThreads>
__global__ void __launch_bounds__(kThreads) embedding(const kiln_params::EmbeddingParams p) {
    __shared__ int sid;
    const int t = blockIdx.x;
    if (t >= p.tokens) return;
    if (threadIdx.x == 0) {
        int id = p.ids[t];
        for (int f = 0; f < p.feed_count; ++f) {
            const int2 e = p.feed[f];
            if (e.x == t && e.y >= 0 && e.y < p.prev_count) id = p.prev_tokens[e.y];
        }
        if (p.ids_out) p.ids_out[t] = id;
        sid = id;
    }
    __syncthreads();
    const int local = sid - p.vocab_start;
    const int chunks = p.dim / 8;
    uint4* out = reinterpret_cast<uint4*>(p.out + i64(t) * p.dim);
    if (local < 0 || local >= p.vocab) {
        for (int c = threadIdx.x; c < chunks; c += kThreads) out[c] = make_uint4(0, 0, 0, 0);
        return;
    }
    const uint4* src = reinterpret_cast<const uint4*>(p.table + i64(local) * p.dim);
    for (int c = threadIdx.x; c < chunks; c += kThreads) out[c] = src[c];
}

}  // namespace kiln_dev
