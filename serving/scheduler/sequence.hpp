// One sequence as the scheduler tracks it: its tokens, where its computation stands, and the memory
// it holds while running.
//
// Memory of a running sequence (the slot policy): it owns its KDA working slot and at most two
// snapshot slots (a ping-pong pair: the second is taken only when a step snapshots while the previous
// step's snapshot is still in flight), and it pins one checkpoint of the prefix tree with a lock, its
// committed prefix (the checkpoint it was restored from, then its latest donation): four slots per
// running sequence, no more. It holds one reference on each KV page of its page table. A waiting
// sequence holds nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/forward/batch.hpp"
#include "serving/memory/radix_cache.hpp"

namespace kiln::serving::scheduler {

using SeqId = uint64_t;
using memory::NodeRef;
using memory::PageId;
using memory::SlotId;
using memory::Token;

struct Sequence {
    SeqId id = 0;
    uint64_t priority = 0;           // lower runs first (arrival order); ties by id
    std::vector<Token> tokens;       // prompt, then the generated tokens committed so far
    size_t prompt_len = 0;
    uint32_t max_tokens = 0;         // generated tokens allowed
    model::forward::Sampling sampling;
    bool pass_prompt = false;        // the device needs the prompt (repetition penalty)
    bool pass_output = false;        // the device needs the generated tokens (penalties, seeded sampling)

    bool running = false;
    uint32_t epoch = 0;              // bumped by every preemption: steps planned before it are void
    size_t computed = 0;             // positions covered by the steps launched so far
    uint32_t in_flight = 0;          // samples launched and not yet committed
    size_t prefill_end = 0;          // tokens.size() at admission: chunks up to it are prefill
    size_t branch_len = 0;           // a chunk ends here so the branch point gets a checkpoint
    int64_t cached_tokens = -1;      // positions restored from the prefix cache at the first admission
    uint32_t preemptions = 0;

    SlotId working = memory::no_slot;
    std::vector<SlotId> snapshots;   // owned snapshot slots, written by steps not yet committed
    std::vector<PageId> pages;       // one reference each
    std::vector<int32_t> table;      // batch indices of pages[0, table.size()), valid in memory layout `layout`
    uint64_t layout = 0;

    uint64_t planned = 0;            // the scheduler's plan that last gave it a step
    uint64_t fed_in = 0;             // the plan in which fed_from holds: its index in the step in flight
    int32_t fed_from = -1;
    NodeRef lock;                    // the committed prefix (with a prefix cache)
    bool locked = false;

    size_t generated() const { return tokens.size() - prompt_len; }
    size_t remaining() const { return tokens.size() - computed; }  // known tokens not yet scheduled
    bool wants_sample() const { return generated() + in_flight < max_tokens; }
    size_t owned_slots() const { return (working != memory::no_slot) + snapshots.size(); }
};

}  // namespace kiln::serving::scheduler
