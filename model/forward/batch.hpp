// One forward step as the serving engine asks for it, on either backend.
//
// A step runs, in stream order: the memory moves (the unified pool's compaction), the state copies
// (copy-on-write restores of KDA state slots), then the K3 layers over every sequence's new tokens
// (prefill chunks and decodes mixed, varlen), snapshots of KDA states at the chunk boundaries asked for,
// and per sequence that asks for it a token sampled on the device from its last position's logits (logits
// never cross to the host). All indices are physical (the engine's pools map their ids); memory is one
// arena per backend: KDA state slot i at byte i x slot_bytes from its start, KV page j at byte
// (j + 1) x page_bytes from its end, so split pools and the unified two-ended pool address it the same way.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::model::forward {

// Sampling applied on the device (the engine maps the API's fields onto these).
struct Sampling {
    float temperature = 0.0f;  // 0: greedy
    float top_p = 1.0f;
    int32_t top_k = 0;         // 0: off
    float min_p = 0.0f;
    float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // over the generated tokens
    float repetition_penalty = 1.0f;                          // over prompt and generated tokens
    bool seeded = false;
    uint64_t seed = 0;         // with `seeded`: the same seed and step give the same token
    uint32_t logprobs = 0;     // 0: none; k: the chosen token's log-softmax and the k most likely
    bool want_logprobs = false;
};

struct Move {  // bytes within the arena, regions not overlapping
    uint64_t src = 0, dst = 0, bytes = 0;
};

struct StateCopy {  // whole KDA state slot (recurrent state and conv state of every KDA layer)
    int32_t src_slot = -1, dst_slot = -1;
};

struct Snapshot {  // the state after `position` tokens, written into `slot`
    int32_t position = 0;
    int32_t slot = -1;
};

struct SequenceStep {
    std::vector<int32_t> tokens;      // the new tokens (a prefill chunk, one decode token)
    int32_t start = 0;                // their first position: tokens already in the KV and the state
    int32_t slot = -1;                // the KDA working slot, read and updated in place
    bool fresh_state = false;         // zero the slot first (start must be 0)
    std::vector<int32_t> pages;       // KV pages covering positions [0, start + tokens.size())
    std::vector<Snapshot> snapshots;  // at positions in (start, start + tokens.size()], multiples of 64
    bool sample = false;              // sample a token from the last position
    Sampling sampling;
    std::vector<int32_t> prompt;      // for the repetition penalty (only when it is on)
    std::vector<int32_t> output;      // tokens generated so far (penalties; the seeded RNG's step)
    // Overlap scheduling: the host plans this step before it has the previous step's results. When
    // >= 0, the first new token is the one sequence `feed_from` of the previous launched step sampled
    // (tokens[0] holds -1 and is replaced on the device), and `output`, when given, lacks that token
    // (the device appends it).
    int32_t feed_from = -1;
};

struct ForwardBatch {
    std::vector<Move> moves;
    std::vector<StateCopy> copies;
    std::vector<SequenceStep> seqs;
};

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
};

struct SequenceResult {
    int32_t token = -1;                // the sampled token (-1: the sequence did not sample)
    TokenLogprob chosen;               // with want_logprobs
    std::vector<TokenLogprob> top;     // with logprobs > 0, most likely first
    bool nonfinite = false;            // the logits held a NaN or inf: the engine fails the request
};

struct StepResult {
    std::vector<SequenceResult> seqs;  // in the batch's order
};

}  // namespace kiln::model::forward
