#include "model/reference/token_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

namespace kiln::model::reference {

namespace {
uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
}  // namespace

double sampling_uniform(uint64_t seed, uint64_t step) {
    const uint64_t r = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (step * 0xd1b54a32d192ed03ull + 1));
    return double(r >> 11) * 0x1.0p-53;
}

SampledToken sample_token(std::span<const float> logits, const forward::Sampling& s, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, double u) {
    SampledToken out;
    const size_t V = logits.size();
    for (float x : logits)
        if (!std::isfinite(x)) {
            out.nonfinite = true;
            return out;
        }
    std::vector<double> z(logits.begin(), logits.end());

    auto log_softmax_of = [&](const std::vector<double>& v) {
        const double m = *std::max_element(v.begin(), v.end());
        double sum = 0;
        for (double x : v) sum += std::exp(x - m);
        return m + std::log(sum);
    };
    double lse = 0;
    if (s.want_logprobs || s.logprobs > 0) lse = log_softmax_of(z);

    if (s.repetition_penalty != 1.0f) {
        std::unordered_set<int32_t> seen(prompt.begin(), prompt.end());
        seen.insert(output.begin(), output.end());
        for (int32_t t : seen)
            if (t >= 0 && size_t(t) < V) z[t] = z[t] > 0 ? z[t] / s.repetition_penalty : z[t] * s.repetition_penalty;
    }
    if (s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f) {
        std::unordered_map<int32_t, int> count;
        for (int32_t t : output) ++count[t];
        for (auto [t, c] : count)
            if (t >= 0 && size_t(t) < V) z[t] -= double(s.frequency_penalty) * c + double(s.presence_penalty);
    }

    int32_t tok = 0;
    if (s.temperature <= 0.0f) {
        tok = int32_t(std::max_element(z.begin(), z.end()) - z.begin());  // first maximum: the lower id
    } else {
        for (double& x : z) x /= s.temperature;
        std::vector<int32_t> order(V);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
        size_t keep = V;
        if (s.top_k > 0) keep = std::min<size_t>(keep, size_t(s.top_k));
        const double m = z[order[0]];
        std::vector<double> p(keep);
        double sum = 0;
        for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(z[order[i]] - m);
        for (double& x : p) x /= sum;
        if (s.top_p < 1.0f) {
            double acc = 0;
            size_t n = 0;
            while (n < keep) {
                acc += p[n++];
                if (acc >= double(s.top_p)) break;
            }
            keep = std::max<size_t>(n, 1);
        }
        if (s.min_p > 0.0f) {
            size_t n = 1;
            while (n < keep && p[n] >= double(s.min_p) * p[0]) ++n;
            keep = n;
        }
        double total = 0;
        for (size_t i = 0; i < keep; ++i) total += p[i];
        const double draw = (s.seeded ? sampling_uniform(s.seed, output.size()) : u) * total;
        double acc = 0;
        tok = order[keep - 1];
        for (size_t i = 0; i < keep; ++i) {
            acc += p[i];
            if (draw < acc) {
                tok = order[i];
                break;
            }
        }
    }
    out.token = tok;
    if (s.want_logprobs || s.logprobs > 0) {
        out.chosen = {tok, float(double(logits[tok]) - lse)};
        if (s.logprobs > 0) {
            std::vector<int32_t> idx(V);
            std::iota(idx.begin(), idx.end(), 0);
            const size_t k = std::min<size_t>(s.logprobs, V);
            std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                              [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
            for (size_t i = 0; i < k; ++i) out.top.push_back({idx[i], float(double(logits[idx[i]]) - lse)});
        }
    }
    return out;
}

}  // namespace kiln::model::reference
