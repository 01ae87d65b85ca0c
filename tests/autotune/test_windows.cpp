// Window fitting (autotune/windows.hpp) and the verification-cost table (autotune/verify_cost.hpp).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "autotune/verify_cost.hpp"
#include "autotune/windows.hpp"
#include "runtime/error.hpp"

using namespace kiln::autotune;

namespace {

const ShapeKey k_shape{"moe_w4a16", "layer", 256, 96, 16, 4, "mxfp4_g32_e8m0/situ_glu"};

Measurement point(int64_t m, const char* config, double us, int block_m = 8, const char* schedule = "decode") {
    Measurement r;
    r.shape = k_shape;
    r.m = m;
    r.config = config;
    r.median_us = r.min_us = r.max_us = us;
    r.block_m = block_m;
    r.schedule = schedule;
    r.reps = 1;
    return r;
}

}  // namespace

TEST_CASE("one config faster everywhere gives one window over [1, largest M]") {
    std::vector<Measurement> ms;
    for (int64_t m : {1, 2, 4, 8, 16}) {
        ms.push_back(point(m, "tiles=1", 10.0 + m));
        ms.push_back(point(m, "tiles=2", 20.0 + m));
    }
    const auto w = fit_m_windows(ms, 0.03);
    REQUIRE(w.size() == 1);
    CHECK(w[0].m_lo == 1);
    CHECK(w[0].m_hi == 16);
    CHECK(w[0].bucket == 16);
    CHECK(w[0].config == "tiles=1");
    CHECK(w[0].us == doctest::Approx(26.0));
}

TEST_CASE("a crossover splits the windows where the winner changes, without gaps") {
    std::vector<Measurement> ms;
    // tiles=1 wins up to 8, tiles=4 (block_m 32) from 32 on, prefill from 256
    for (int64_t m : {1, 2, 4, 8, 32, 64, 256, 512}) {
        ms.push_back(point(m, "tiles=1", m <= 8 ? 10 : 100, 8));
        ms.push_back(point(m, "tiles=4", m <= 8 ? 30 : m < 256 ? 50 : 90, 32));
        ms.push_back(point(m, "prefill_min=0", m < 256 ? 200 : 60, 64, "prefill"));
    }
    const auto w = fit_m_windows(ms, 0.03);
    REQUIRE(w.size() == 3);
    CHECK(w[0].m_lo == 1);
    CHECK(w[0].m_hi == 31);  // reaches up to the next window's first M
    CHECK(w[0].config == "tiles=1");
    CHECK(w[1].m_lo == 32);
    CHECK(w[1].m_hi == 255);
    CHECK(w[1].block_m == 32);
    CHECK(w[2].m_lo == 256);
    CHECK(w[2].m_hi == 512);
    CHECK(w[2].schedule == "prefill");
    CHECK(find_window(w, 1) == &w[0]);
    CHECK(find_window(w, 31) == &w[0]);
    CHECK(find_window(w, 32) == &w[1]);
    CHECK(find_window(w, 100000) == &w[2]);

    const auto t = toke_windows(w);  // topk 4 over 16 experts: tok = m / 4
    REQUIRE(t.size() == 3);
    CHECK(t[0].tok_lo == doctest::Approx(0.25));
    CHECK(t[1].tok_lo == doctest::Approx(8.0));
    CHECK(t[2].tok_hi == doctest::Approx(128.0));
    CHECK(t[2].block_m == 64);
}

TEST_CASE("the tolerance keeps one config through small losses, zero tolerance does not") {
    std::vector<Measurement> ms;
    for (int64_t m : {1, 2, 3, 4}) {
        ms.push_back(point(m, "a", m % 2 ? 100 : 101));
        ms.push_back(point(m, "b", m % 2 ? 101 : 100));
    }
    CHECK(fit_m_windows(ms, 0.02).size() == 1);
    CHECK(fit_m_windows(ms, 0.0).size() == 4);
}

TEST_CASE("a config missing at some M of a window is not chosen for it; bad input is refused") {
    std::vector<Measurement> ms = {point(1, "a", 10), point(1, "b", 10.1), point(2, "b", 10), point(4, "a", 9),
                                   point(4, "b", 9.1)};
    const auto w = fit_m_windows(ms, 0.05);
    REQUIRE(w.size() == 1);
    CHECK(w[0].config == "b");
    const auto custom = fit_m_windows(ms, 0.05, [](const MWindow& x) { return x.m_hi * 2; });
    CHECK(custom[0].bucket == 8);

    CHECK_THROWS_AS(fit_m_windows({}, 0.03), kiln::InvalidArgument);
    std::vector<Measurement> mixed = {point(1, "a", 1), point(2, "a", 1)};
    mixed[1].shape.n = 512;
    CHECK_THROWS_AS(fit_m_windows(mixed, 0.03), kiln::InvalidArgument);
    CHECK_THROWS_AS(fit_m_windows(ms, -1), kiln::InvalidArgument);
}

TEST_CASE("verify_cost is forced monotone along both axes and keeps the measurements") {
    VerifyCostTable t;
    t.requests = {1, 2, 4};
    t.tokens = {1, 2, 4, 8};
    t.measured_ms = {1.0, 1.0, 0.9, 2.0,   // a dip at 4 tokens
                     1.1, 0.8, 1.2, 2.1,   // a dip below the row above
                     1.5, 1.6, 1.6, 3.0};
    force_monotone(t);
    for (size_t r = 0; r < 3; ++r)
        for (size_t c = 0; c < 4; ++c) {
            if (r > 0) CHECK(t.at(r, c) >= t.at(r - 1, c));
            if (c > 0) CHECK(t.at(r, c) >= t.at(r, c - 1));
            CHECK(t.at(r, c) >= t.measured(r, c));
        }
    CHECK(t.at(0, 2) == doctest::Approx(1.0));
    CHECK(t.at(1, 1) == doctest::Approx(1.1));
    CHECK(t.measured(1, 1) == doctest::Approx(0.8));
    CHECK(t.cost(3, 5) == doctest::Approx(3.0));  // covered by 4 requests x 8 tokens
    CHECK(t.cost(1, 100) == doctest::Approx(2.0));
    CHECK_THROWS_AS(t.cost(0, 1), kiln::InvalidArgument);

    const auto sh = shelves(t, 0.05);  // row 1: a shelf 1..4 tokens at 1.0, then a step at 8
    REQUIRE(sh.size() >= 2);
    CHECK(sh[0].requests == 1);
    CHECK(sh[0].tokens_first == 1);
    CHECK(sh[0].tokens_last == 4);
    CHECK(sh[1].tokens_first == 8);
}

TEST_CASE("measure_verify_cost times every cell with a host step timer") {
    // A host step whose work grows with requests x tokens: a real loop timed by the steady clock.
    std::vector<int> calls;
    volatile double sink = 0;
    auto timer = [&](int r, int k) {
        calls.push_back(r * 100 + k);
        const auto a = std::chrono::steady_clock::now();
        double acc = 0;
        for (long i = 0; i < 20000L * r * k; ++i) acc += std::sqrt(static_cast<double>(i));
        sink = sink + acc;
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    };
    const std::vector<int> reqs = {1, 2, 4}, toks = {1, 4, 16};
    const VerifyCostTable t = measure_verify_cost(reqs, toks, timer, 3, 1);
    CHECK(calls.size() == 9 * 4);
    REQUIRE(t.ms.size() == 9);
    for (size_t r = 0; r < 3; ++r)
        for (size_t c = 1; c < 3; ++c) CHECK(t.at(r, c) >= t.at(r, c - 1));
    CHECK(t.at(2, 2) > t.at(0, 0));  // 64x the work costs more

    CHECK_THROWS_AS(measure_verify_cost(std::vector<int>{2, 1}, toks, timer), kiln::InvalidArgument);
    CHECK_THROWS_AS(measure_verify_cost(reqs, std::vector<int>{}, timer), kiln::InvalidArgument);
    CHECK_THROWS_AS(measure_verify_cost(reqs, toks, [](int, int) { return -1.0; }), kiln::InvalidArgument);
}
