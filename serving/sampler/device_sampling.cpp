#include "serving/sampler/device_sampling.hpp"

namespace kiln::serving::sampler {

model::forward::Sampling device_sampling(const SamplingParams& params, uint32_t index) {
    model::forward::Sampling s;
    s.temperature = params.temperature;
    s.top_p = params.top_p;
    s.top_k = params.top_k < 0 ? 0 : params.top_k;
    s.min_p = params.min_p;
    s.presence_penalty = params.presence_penalty;
    s.frequency_penalty = params.frequency_penalty;
    s.repetition_penalty = params.repetition_penalty;
    if (params.seed) {
        s.seeded = true;
        s.seed = static_cast<uint64_t>(*params.seed) + index;
    }
    if (params.logprobs) {
        s.want_logprobs = true;
        s.logprobs = *params.logprobs;
    }
    return s;
}

bool needs_prompt(const model::forward::Sampling& s) { return s.repetition_penalty != 1.0f; }

bool needs_output(const model::forward::Sampling& s) {
    return s.seeded || s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f || s.repetition_penalty != 1.0f;
}

}  // namespace kiln::serving::sampler
