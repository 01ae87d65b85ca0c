// The index arrays of one forward step, built on the host from a ForwardBatch and uploaded as one block.
//
//   StepIndexHost idx = build_step_index(batch, limits);   // validates; InvalidArgument names the problem
//   kiln_params::StepIndex p = staging.upload(idx, arena, spec, stream);   // what the kernels read
//
// The arrays and their meaning are templates/common/step_index_params.h. `tokens` holds the new token ids in
// the same packed order (-1 where a sequence is fed from the previous step's sample). Sequences keep the
// batch's order; every layer of the step reads the same StepIndex.
#pragma once

#include <cstdint>
#include <vector>

#include "common/step_index_params.h"
#include "model/forward/batch.hpp"
#include "runtime/backend.hpp"

namespace kiln::model::forward {

struct StepLimits {
    int32_t num_slots = 0;     // state slots the arena holds
    int32_t num_pages = 0;     // KV pages the arena holds
    int32_t page_size = 1;
    int32_t chunk = 64;        // snapshots only at multiples of it
    int32_t max_tokens = 0;    // new tokens per step
    int32_t max_seqs = 0;      // sequences per step
    int32_t max_position = 0;  // 0: unlimited
    int32_t vocab = 0;
};

struct StepIndexHost {
    std::vector<int32_t> cu_seqlens, seq_start, seq_slot, token_seq, token_pos, page_table;
    std::vector<int32_t> snap_seq, snap_pos, snap_slot;
    std::vector<int32_t> tokens;
    int32_t num_seqs = 0, num_tokens = 0, max_pages = 0, max_new_tokens = 0;
    int32_t num_snaps() const { return int32_t(snap_seq.size()); }
    // Sequences with exactly one new token (decodes) and the rest (prefill chunks).
    int32_t num_decodes = 0;
};

// Checks every index (slots, pages, positions, snapshot positions, token ids, sizes) before anything runs.
StepIndexHost build_step_index(const ForwardBatch& batch, const StepLimits& limits);

// A device copy of a step's index arrays. One staging serves one step in flight: the host block must stay
// alive until the stream has read it, so an executor that overlaps steps keeps one staging per step.
class StepIndexStaging {
public:
    StepIndexStaging() = default;
    // Grows the device block when needed (only between steps: the old block may be in use otherwise).
    kiln_params::StepIndex upload(const StepIndexHost& idx, uint64_t arena_base, uint64_t arena_bytes,
                                  uint64_t slot_bytes, uint64_t page_bytes, int32_t page_size,
                                  runtime::Backend& backend, runtime::Stream& stream);
    // The device address of the packed token ids of the last upload.
    uint64_t tokens() const { return tokens_; }

private:
    std::vector<int32_t> host_;
    runtime::Buffer dev_;
    uint64_t tokens_ = 0;
};

}  // namespace kiln::model::forward
