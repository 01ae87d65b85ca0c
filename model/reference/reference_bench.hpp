// What `kiln bench reference` measures: prefill (the whole prompt in one forward call: chunked KDA,
// plain MLA) and greedy decode (one token per call: recurrent KDA, absorbed MLA) on the fp32 reference
// path, in wall and thread-CPU seconds. The prompt is a fixed pseudo-random one over the vocabulary.
#pragma once

#include <cstddef>

#include "model/reference/forward.hpp"

namespace kiln::model::reference {

struct ReferenceBenchResult {
    size_t prompt_tokens = 0, decode_tokens = 0;
    double prefill_seconds = 0, prefill_cpu_seconds = 0;
    double decode_seconds = 0, decode_cpu_seconds = 0;
    size_t state_bytes = 0;     // the request's state after the run
    size_t state_position = 0;  // tokens in it
};

// Throws InvalidArgument when prompt_tokens is 0.
ReferenceBenchResult run_reference_bench(const ReferenceModel& model, size_t prompt_tokens, size_t decode_tokens);

}  // namespace kiln::model::reference
