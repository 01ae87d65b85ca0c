// The host side of the dense families that a forward step feeds from its ForwardBatch
// (model/forward/batch.hpp): the sampler's per-sequence settings and packed penalty lists, the
// embedding's feed map, and the SequenceResults read back from the sampler's output array.
//
// Indices: the sampler runs one row per sequence with `sample` set, in batch order; sample_rows(batch)
// maps batch sequence i to its row (-1: it does not sample). A sequence's feed_from names a sequence of
// the previous launched batch, so the feed map and the fed token's penalty use that batch's rows (its
// tokens_out array, what the previous sample launch wrote, is the device array they read).
#pragma once

#include <cstdint>
#include <vector>

#include "common/sample_params.h"
#include "model/forward/batch.hpp"

namespace kiln::model::layers {

// Row of each batch sequence in the sampler's arrays, -1 for sequences that do not sample.
std::vector<int32_t> sample_rows(const forward::ForwardBatch& batch);

struct SampleInputs {
    std::vector<kiln_params::SampleSeq> seqs;  // one per sampling sequence, batch order
    std::vector<int32_t> penalty_tokens;       // the packed lists seqs point into (never empty)
    std::vector<int32_t> batch_index;          // the batch sequence of each row
};

// Validates every sampling sequence's Sampling (InvalidArgument naming the sequence and the field:
// temperature finite and >= 0, top_p in (0, 1], min_p in [0, 1], top_k >= 0, repetition_penalty > 0 and
// finite, presence / frequency finite, logprobs <= KILN_SAMPLE_MAX_TOP) and builds the settings. `prev_rows`
// is sample_rows() of the previous launched batch (for feed_from); `unseeded` is the seed of sequences that
// are not seeded (the engine draws it per step). The RNG step is the generated-token count, the fed token
// included. Prompt tokens are packed only when the repetition penalty is on, generated ones only when a
// penalty is.
SampleInputs build_sample_inputs(const forward::ForwardBatch& batch, const std::vector<int32_t>& prev_rows,
                                 uint64_t unseeded);

// The embedding feed map: (token row in the step's concatenated tokens, row in the previous step's tokens_out)
// per fed sequence, flattened. Throws InvalidArgument for a feed_from with no sampling row in `prev_rows`.
std::vector<int32_t> build_feed_map(const forward::ForwardBatch& batch, const std::vector<int32_t>& prev_rows);

// The StepResult of a batch from the sampler's downloaded outputs (one per row of build_sample_inputs).
forward::StepResult step_result(const forward::ForwardBatch& batch, const SampleInputs& in,
                                const std::vector<kiln_params::SampleOut>& out);

}  // namespace kiln::model::layers
