// Next-token choice for the reference decoding loop. temperature 0 is greedy (argmax, ties to the lower
// id). Otherwise the logits are divided by the temperature, softmaxed in fp64, cut to the smallest set of
// most likely tokens whose probability reaches top_p (nucleus sampling; 1 keeps all), renormalised and
// sampled with a seeded 64-bit Mersenne Twister, so a (seed, logits) sequence always gives the same ids.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace kiln::model::reference {

struct SamplingParams {
    float temperature = 0.0f;
    float top_p = 1.0f;
    uint64_t seed = 0;

    // Throws InvalidArgument naming the bad value (temperature < 0 or not finite, top_p outside (0, 1]).
    void validate() const;
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);
    uint32_t next(std::span<const float> logits);

private:
    SamplingParams params_;
    std::mt19937_64 rng_;
};

}  // namespace kiln::model::reference
