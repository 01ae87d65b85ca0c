// The per-step sampling of model/forward/batch.hpp (Sampling) in fp64 on the host: the reference for the
// device sampler and what the reference executor samples with.
//
// Order, as vLLM applies it: log-softmax of the raw logits for the logprobs; repetition penalty over prompt
// and output tokens (logit / p when positive, x p otherwise), frequency and presence penalties over the
// output; temperature 0 takes the argmax (ties to the lower id); otherwise logits / temperature, top-k, softmax,
// top-p (the smallest most-likely set reaching it), min-p (relative to the most likely), renormalise and
// draw with `u` in [0, 1). A seeded sequence draws u = sampling_uniform(seed, step) with step = the number of
// tokens generated before this one, so the same seed and step give the same token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/forward/batch.hpp"

namespace kiln::model::reference {

struct SampledToken {
    int32_t token = -1;
    forward::TokenLogprob chosen;
    std::vector<forward::TokenLogprob> top;  // s.logprobs most likely, most likely first
    bool nonfinite = false;                  // the logits held a NaN or inf (token stays -1)
};

// A counter-based uniform in [0, 1): the same (seed, step) always gives the same value.
double sampling_uniform(uint64_t seed, uint64_t step);

// `u` is used when s.seeded is false.
SampledToken sample_token(std::span<const float> logits, const forward::Sampling& s, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, double u);

}  // namespace kiln::model::reference
