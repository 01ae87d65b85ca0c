// Family mla_cache_append: writes each new token's (ĉ, k_rope) row into its slot of the paged latent cache.
// Token t of the step (idx.token_seq[t], idx.token_pos[t] = p) goes to page idx.page_table[s x max_pages +
// p / page_size], row p % page_size, at byte layer_offset of the page: d_c values of the normed latent, then
// d_r values of the raw rope tail, bf16, token-major (model/forward/memory_layout.hpp).
#pragma once

#include "common/kiln_params.h"
#include "common/step_index_params.h"

namespace kiln_params::mla {

struct CacheAppendParams {
    StepIndex idx;
    const bf16* latent;  // [num_tokens, latent_stride]: the first d_c values of a row
    const bf16* k_rope;  // [num_tokens, rope_stride]: the first d_r values of a row
    u64 layer_offset;    // this MLA layer's bytes inside a page (MemoryLayout::mla_offset)
    i32 latent_stride;   // elements between rows
    i32 rope_stride;
    i32 d_c;
    i32 d_r;
};
KILN_PARAMS_SIZE(CacheAppendParams, 168);
KILN_PARAMS_OFFSET(CacheAppendParams, latent, 128);
KILN_PARAMS_OFFSET(CacheAppendParams, layer_offset, 144);
KILN_PARAMS_OFFSET(CacheAppendParams, d_r, 164);

}  // namespace kiln_params::mla
