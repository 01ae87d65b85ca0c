// What the serving engine drives: a model's forward pass on one backend, one step at a time, with the
// host free to plan step N+1 while the device runs step N (launch returns at once; wait blocks for that
// step's results only).
#pragma once

#include <cstdint>

#include "model/forward/batch.hpp"

namespace kiln::model::forward {

struct MemorySpec {
    uint64_t slot_bytes = 0;   // one KDA state slot: fp32 recurrent state + conv state of every KDA layer
    uint64_t page_bytes = 0;   // one KV page: page_size tokens of every MLA layer's 576-value latent
    int32_t page_size = 1;     // tokens per KV page
    int32_t chunk = 64;        // KDA chunk: snapshots only at multiples of it
    int32_t max_tokens = 0;    // new tokens one step may carry (the plan's workspace)
    int32_t max_seqs = 0;      // sequences one step may carry
    int32_t max_position = 0;  // the model's context (max_position_embeddings)
    int32_t vocab = 0;
    std::vector<int32_t> eos;  // the config's end-of-sequence ids
};

class ForwardExecutor {
public:
    using Ticket = uint64_t;
    virtual ~ForwardExecutor() = default;

    virtual const MemorySpec& memory() const = 0;
    // Allocates the arena (state slots from its start, KV pages from its end); before the first launch.
    virtual void reserve(uint64_t arena_bytes) = 0;
    // Enqueues the step and returns at once. Throws InvalidArgument for a malformed batch (nothing enqueued).
    virtual Ticket launch(const ForwardBatch& batch) = 0;
    // Blocks until the step of `t` has run; its results. Steps complete in launch order.
    virtual StepResult wait(Ticket t) = 0;
};

}  // namespace kiln::model::forward
