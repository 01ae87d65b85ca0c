// One planned step: the batch the executor runs and, per sequence in it, what the scheduler must do
// when the step's results come back (commit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/forward/batch.hpp"
#include "serving/scheduler/sequence.hpp"

namespace kiln::serving::scheduler {

struct PlannedStep {
    SeqId seq = 0;
    uint32_t epoch = 0;           // the sequence's epoch when planned
    size_t start = 0;             // first position
    size_t count = 0;             // new tokens
    bool sample = false;
    memory::Checkpoint snapshot;  // pos 0: none; else donated to the tree at commit
};

struct StepPlan {
    model::forward::ForwardBatch batch;
    std::vector<PlannedStep> steps;  // parallel to batch.seqs
    size_t prefill_tokens = 0;       // new tokens of steps that sample nothing or several
    size_t decode_tokens = 0;        // one-token sampling steps
    size_t admitted = 0;
    bool empty() const { return steps.empty(); }
};

}  // namespace kiln::serving::scheduler
