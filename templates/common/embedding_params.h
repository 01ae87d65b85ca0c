// Family embedding: out[t] = table[ids[t] - vocab_start] (bf16 rows), a zero row for an id outside
// [vocab_start, vocab_start + vocab) (another rank's shard under a vocab-parallel embedding, or -1).
// The feed map serves overlap scheduling: entry (row, src) replaces ids[row] by prev_tokens[src], the token
// the previous step sampled on the device (src outside [0, prev_count): the id stays). ids_out, when given,
// receives the ids used (so later kernels of the step see the fed tokens).
#pragma once

#include "common/kiln_params.h"

namespace kiln_params {

struct EmbeddingParams {
    const i32* ids;          // [tokens]
    const bf16* table;       // [vocab, dim]
    bf16* out;               // [tokens, dim]
    const i32x2* feed;       // [feed_count] (token row, index into prev_tokens)
    const i32* prev_tokens;  // [prev_count]
    i32* ids_out;            // [tokens] or null
    i32 tokens;
    i32 dim;
    i32 vocab;
    i32 vocab_start;
    i32 feed_count;
    i32 prev_count;
};
KILN_PARAMS_SIZE(EmbeddingParams, 72);
KILN_PARAMS_OFFSET(EmbeddingParams, tokens, 48);
KILN_PARAMS_OFFSET(EmbeddingParams, prev_count, 68);

}  // namespace kiln_params
