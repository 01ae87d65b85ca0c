// The API's sampling fields as the forward applies them on the device (model::forward::Sampling),
// and what a step must carry for them: the prompt for the repetition penalty, the generated tokens
// for the presence / frequency penalties and for a seeded sampler's step count.
#pragma once

#include <cstdint>

#include "model/forward/batch.hpp"
#include "serving/engine/request.hpp"

namespace kiln::serving::sampler {

// Sequence `index` of a request with n > 1 samples with seed + index (wrapping).
model::forward::Sampling device_sampling(const SamplingParams& params, uint32_t index);

bool needs_prompt(const model::forward::Sampling& s);  // repetition penalty on
bool needs_output(const model::forward::Sampling& s);  // any penalty on, or seeded

}  // namespace kiln::serving::sampler
