#include "model/reference/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::reference {

void SamplingParams::validate() const {
    if (!std::isfinite(temperature) || temperature < 0.0f)
        throw InvalidArgument(fmt::format("temperature must be a finite value >= 0, got {}", temperature));
    if (!(top_p > 0.0f && top_p <= 1.0f)) throw InvalidArgument(fmt::format("top-p must be in (0, 1], got {}", top_p));
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

uint32_t Sampler::next(std::span<const float> logits) {
    if (logits.empty()) throw InvalidArgument("sampler: no logits");
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best]) best = i;
    if (params_.temperature == 0.0f) return uint32_t(best);

    const double inv_t = 1.0 / double(params_.temperature), mx = logits[best];
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += (p[i] = std::exp((double(logits[i]) - mx) * inv_t));
    std::vector<uint32_t> order(p.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return p[a] > p[b]; });
    // Nucleus: keep the most likely tokens until their mass reaches top_p.
    size_t keep = 0;
    double mass = 0;
    while (keep < order.size() && (keep == 0 || mass < double(params_.top_p) * sum)) mass += p[order[keep++]];
    // A uniform draw in [0, mass) from 53 random bits.
    double u = double(rng_() >> 11) * 0x1.0p-53 * mass;
    for (size_t i = 0; i < keep; ++i) {
        u -= p[order[i]];
        if (u < 0) return order[i];
    }
    return order[keep - 1];
}

}  // namespace kiln::model::reference
