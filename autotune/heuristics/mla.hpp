// The MLA layer's choices (model/layers/mla.hpp): the attention CTA shapes and how finely the context is split
// into pieces (flash-decoding) for a step. Defaults are documented in docs/perf/mla.md ("Choices").
#pragma once

#include <cstdint>

namespace kiln::autotune {

struct MlaTuning {
    // device: the bf16 tensor-core attention kernels (mma.sync, 32 query rows per CTA) instead of CUDA-core FMAs
    // (the layer takes the FMA kernels where d_c + d_r is not a multiple of 16)
    bool decode_mma = true;
    bool prefill_mma = true;
    int decode_heads_per_cta = 32;   // mla_decode query heads per CTA: 8, 16, 24, 32 (32 with decode_mma)
    int prefill_tokens_per_cta = 4;  // mla_prefill: 1, 2, 4 tokens of a sequence per CTA ...
    int prefill_heads_per_cta = 8;   // ... times this many heads: 8, 16, 24 or 32 rows (32 with prefill_mma)
    int target_ctas_per_cu = 2;      // the context is split until the attention launches this many CTAs per unit
    int min_split_keys = 256;        // no piece shorter than this (a multiple of 64)
    int max_splits = 16;             // pieces per token, at most 64
    int64_t partial_rows = 32768;    // workspace: (token, head, piece) rows of fp32 partial outputs
};

inline MlaTuning default_mla_tuning() { return {}; }
// Throws InvalidArgument naming the first field out of range.
void validate(const MlaTuning& t);

struct MlaSplit {
    int splits = 1;      // pieces of the longest context (the attention grid's second dimension)
    int split_keys = 64; // keys per piece, a multiple of 64; splits x split_keys covers max_kv
};

// Pieces for a step whose longest context (cached + new tokens) is `max_kv` keys, whose attention launches
// have `ctas` CTAs unsplit, over `rows` (token, head) query rows, on `compute_units` units: as many as bring the
// CTAs to target_ctas_per_cu per unit, within max_splits, the workspace and min_split_keys.
MlaSplit choose_mla_split(const MlaTuning& t, int64_t max_kv, int64_t ctas, int64_t rows, int compute_units);

}  // namespace kiln::autotune
