// Every knob of the serving engine. Each field becomes a `kiln serve` flag (the name with dashes:
// max_batch_tokens -> --max-batch-tokens) and a KILN_* variable (KILN_MAX_BATCH_TOKENS); zero means
// "the default derived from the model" where a field says so.
#pragma once

#include <cstdint>
#include <string>

#include "model/forward/executor.hpp"

namespace kiln::serving {

struct EngineOptions {
    // Batching.
    uint32_t max_batch_tokens = 2048;  // new tokens per step (decodes first, then prefill chunks); <= the model's
    uint32_t max_running = 256;        // sequences running at once (a request counts n); <= max_batch_tokens
    uint32_t max_waiting = 1024;       // requests queued; submit() beyond it throws Overloaded
    uint32_t prefill_chunk = 0;        // prefill tokens per sequence per step (0: the whole budget)
    bool overlap_schedule = true;      // plan and launch step N+1 while step N runs

    // Memory: one arena of memory_bytes holds the KDA state slots and the MLA KV pages.
    uint64_t memory_bytes = 0;             // 0: per running sequence, four state slots and the KV of
                                           // min(max_model_len, 4096) tokens
    bool enable_unified_memory = false;    // slots and pages grow from the two ends of one pool
    double state_memory_fraction = 0.5;    // split pools: the share of memory_bytes given to state slots
    uint32_t page_size = 0;                // KV tokens per page the executor must use (0: the executor's)
    uint32_t max_model_len = 0;            // prompt + generated tokens per sequence (0: the model's context,
                                           // capped to the tokens the KV pages hold)

    // Prefix cache (radix tree over tokens, KV pages plus sparse KDA checkpoints).
    bool enable_prefix_cache = true;
    uint32_t track_interval = 256;         // decode: a checkpoint every this many positions (0: none);
                                           // rounded up to the checkpoint grid lcm(64, page_size)
    uint32_t max_checkpoints_per_path = 0; // 0: no cap
};

// The options as the engine runs them: defaults filled in and checked against the executor.
struct ResolvedOptions {
    EngineOptions options;
    uint32_t page_size = 1;
    uint32_t grid = 64;             // checkpoint positions: multiples of lcm(chunk, page_size)
    uint32_t track_interval = 0;    // a multiple of grid, or 0
    uint32_t max_model_len = 0;
    uint32_t max_batch_tokens = 0;  // clamped to the executor's max_tokens
    uint32_t max_running = 0;       // clamped to the executor's max_seqs and max_batch_tokens
};

// Throws InvalidArgument naming the flag (e.g. "--max-running: ...") for a value out of range or one
// the executor cannot serve.
ResolvedOptions resolve_options(const EngineOptions& options, const model::forward::MemorySpec& spec);

}  // namespace kiln::serving
