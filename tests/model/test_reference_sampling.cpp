#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "model/reference/sampling.hpp"
#include "runtime/error.hpp"

using namespace kiln::model::reference;
using doctest::Approx;

TEST_CASE("greedy picks the argmax, ties to the lower id") {
    Sampler s(SamplingParams{});
    std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
    CHECK(s.next(logits) == 1);
    CHECK(s.next(logits) == 1);
}

TEST_CASE("sampling follows softmax(logits / T)") {
    // p ∝ [1, 2, 3, 4] at T = 1; at T = 0.5 p ∝ [1, 4, 9, 16].
    std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    for (float T : {1.0f, 0.5f}) {
        Sampler s(SamplingParams{T, 1.0f, 42});
        std::map<uint32_t, int> count;
        const int n = 40000;
        for (int i = 0; i < n; ++i) count[s.next(logits)]++;
        double z = 0;
        for (int i = 1; i <= 4; ++i) z += std::pow(double(i), 1.0 / T);
        for (uint32_t i = 0; i < 4; ++i) CHECK(double(count[i]) / n == Approx(std::pow(i + 1.0, 1.0 / T) / z).epsilon(0.05));
    }
}

TEST_CASE("top-p keeps the smallest most likely set reaching p") {
    // p = [.1, .2, .3, .4]; top_p 0.5 keeps {3, 2} (0.4 < 0.5, 0.7 >= 0.5), renormalised to 4/7, 3/7.
    std::vector<float> logits{std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
    Sampler s(SamplingParams{1.0f, 0.5f, 7});
    std::map<uint32_t, int> count;
    const int n = 20000;
    for (int i = 0; i < n; ++i) count[s.next(logits)]++;
    CHECK(count[0] == 0);
    CHECK(count[1] == 0);
    CHECK(double(count[3]) / n == Approx(4.0 / 7).epsilon(0.05));
    // A tiny top_p is greedy.
    Sampler g(SamplingParams{1.0f, 1e-6f, 7});
    for (int i = 0; i < 100; ++i) CHECK(g.next(logits) == 3);
}

TEST_CASE("same seed, same draws; different seeds differ") {
    std::vector<float> logits(50);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
    auto draw = [&](uint64_t seed) {
        Sampler s(SamplingParams{1.0f, 1.0f, seed});
        std::vector<uint32_t> ids;
        for (int i = 0; i < 64; ++i) ids.push_back(s.next(logits));
        return ids;
    };
    CHECK(draw(5) == draw(5));
    CHECK(draw(5) != draw(6));
}

TEST_CASE("sampling parameters are validated") {
    CHECK_THROWS_AS(Sampler(SamplingParams{-1.0f, 1.0f, 0}), kiln::InvalidArgument);
    CHECK_THROWS_AS(Sampler(SamplingParams{NAN, 1.0f, 0}), kiln::InvalidArgument);
    CHECK_THROWS_AS(Sampler(SamplingParams{1.0f, 0.0f, 0}), kiln::InvalidArgument);
    CHECK_THROWS_AS(Sampler(SamplingParams{1.0f, 1.5f, 0}), kiln::InvalidArgument);
}
