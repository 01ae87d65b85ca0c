// Embedding gather with the feed map on the host target (contract: templates/common/embedding_params.h).
#pragma once

#include "host/dense_common.hpp"
#include "common/embedding_params.h"

namespace kiln_host {

inline void embedding(const kiln_host_ctx* ctx, const kiln_params::EmbeddingParams& p) {
    const i64 dim = p.dim;
    for_each(ctx, p.tokens, 16, [&](i64 t) {
        i32 id = p.ids[t];
        for (i32 f = 0; f < p.feed_count; ++f)
            if (p.feed[f].x == t && p.feed[f].y >= 0 && p.feed[f].y < p.prev_count) id = p.prev_tokens[p.feed[f].y];
        if (p.ids_out) p.ids_out[t] = id;
        const i64 local = static_cast<i64>(id) - p.vocab_start;
        u16* out = p.out + t * dim;
        if (local < 0 || local >= p.vocab) {
            for (i64 c = 0; c < dim; ++c) out[c] = 0;
            return;
        }
        __builtin_memcpy(out, p.table + local * dim, static_cast<size_t>(dim) * 2);
    });
}

}  // namespace kiln_host
