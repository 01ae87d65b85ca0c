// Family kda_chunk: the KDA delta rule of one step's prefill sequences, chunkwise (chunk 64 aligned to
// absolute positions, so every multiple of 64 ends a chunk). Reads the activated inputs of kda_prep, the
// fp32 state [H, K, V] (key-major) of each sequence's working slot as its initial state, writes the final
// state back in place, the state at every snapshot position of the step into the snapshot slot, and the
// ungated output o [num_tokens, H x V] fp32 (kda_out_norm normalises and gates it).
#pragma once

#include "common/kiln_params.h"
#include "common/step_index_params.h"

namespace kiln_params {

struct KdaChunkParams {
    StepIndex idx;
    const float* q;         // [num_tokens, H x K], normalised and scaled
    const float* k;         // [num_tokens, H x K], normalised
    const float* v;         // [num_tokens, H x V]
    const float* g;         // [num_tokens, H x K] log decay (<= 0)
    const float* beta;      // [num_tokens, H]
    float* o;               // [num_tokens, H x V]
    u64 state_offset;       // bytes from a slot's start to this layer's recurrent state
    i32 heads;
    i32 skip_single;        // 1: sequences with one new token are left to kda_decode
};
KILN_PARAMS_SIZE(KdaChunkParams, 192);
KILN_PARAMS_OFFSET(KdaChunkParams, q, 128);
KILN_PARAMS_OFFSET(KdaChunkParams, state_offset, 176);
KILN_PARAMS_OFFSET(KdaChunkParams, skip_single, 188);

}  // namespace kiln_params
