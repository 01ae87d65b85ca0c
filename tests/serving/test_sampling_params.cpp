// validate_sampling: vLLM's ranges, one field at a time, each error naming its field, and the
// normalisation that follows.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "serving/engine/request.hpp"

using namespace kiln::serving;

namespace {

// The param of the InvalidRequest validate_sampling throws for `p`, or "" when it accepts it.
std::string rejected_param(SamplingParams p, const SamplingLimits& limits = {}) {
    try {
        validate_sampling(p, limits);
        return "";
    } catch (const InvalidRequest& e) {
        const std::string what = e.what();
        CHECK_MESSAGE(what.find(e.param()) != std::string::npos, "message names the field: ", what);
        return e.param();
    }
}

SamplingParams with(const std::function<void(SamplingParams&)>& f) {
    SamplingParams p;
    f(p);
    return p;
}

const float inf = std::numeric_limits<float>::infinity();
const float not_a_number = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("the defaults are valid and unchanged by validation") {
    SamplingParams p;
    validate_sampling(p);
    CHECK(p.n == 1);
    CHECK(p.temperature == 1.0f);
    CHECK(p.top_p == 1.0f);
    CHECK(p.top_k == 0);
    CHECK(p.max_tokens == 16);
    CHECK_FALSE(p.logprobs.has_value());
}

TEST_CASE("every range check names its field") {
    struct Case {
        const char* param;
        std::function<void(SamplingParams&)> bad;
        std::function<void(SamplingParams&)> edge_ok;
    };
    const Case cases[] = {
        {"n", [](SamplingParams& p) { p.n = 0; }, [](SamplingParams& p) { p.n = 128; }},
        {"n", [](SamplingParams& p) { p.n = 129; }, [](SamplingParams& p) { p.n = 1; }},
        {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.01f; },
         [](SamplingParams& p) { p.presence_penalty = 2.0f; }},
        {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.01f; },
         [](SamplingParams& p) { p.presence_penalty = -2.0f; }},
        {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = not_a_number; }, [](SamplingParams&) {}},
        {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 3.0f; },
         [](SamplingParams& p) { p.frequency_penalty = -2.0f; }},
        {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -inf; }, [](SamplingParams&) {}},
        {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
         [](SamplingParams& p) { p.repetition_penalty = 1e-3f; }},
        {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = inf; },
         [](SamplingParams& p) { p.repetition_penalty = 10.0f; }},
        {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; },
         [](SamplingParams& p) { p.temperature = 0.0f; }},
        {"temperature", [](SamplingParams& p) { p.temperature = 2.5f; },
         [](SamplingParams& p) { p.temperature = 2.0f; }},
        {"temperature", [](SamplingParams& p) { p.temperature = not_a_number; }, [](SamplingParams&) {}},
        {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }, [](SamplingParams& p) { p.top_p = 1e-6f; }},
        {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }, [](SamplingParams& p) { p.top_p = 1.0f; }},
        {"top_k", [](SamplingParams& p) { p.top_k = -2; }, [](SamplingParams& p) { p.top_k = -1; }},
        {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }, [](SamplingParams& p) { p.min_p = 0.0f; }},
        {"min_p", [](SamplingParams& p) { p.min_p = 1.01f; }, [](SamplingParams& p) { p.min_p = 1.0f; }},
        {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }, [](SamplingParams& p) { p.max_tokens = 1; }},
        {"min_tokens",
         [](SamplingParams& p) {
             p.max_tokens = 4;
             p.min_tokens = 5;
         },
         [](SamplingParams& p) {
             p.max_tokens = 4;
             p.min_tokens = 4;
         }},
        {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }, [](SamplingParams& p) { p.logprobs = 20; }},
        {"stop", [](SamplingParams& p) { p.stop = {"ok", ""}; }, [](SamplingParams& p) { p.stop = {"ok", "x"}; }},
        {"stop", [](SamplingParams& p) { p.stop.assign(65, "s"); }, [](SamplingParams& p) { p.stop.assign(64, "s"); }},
        {"stop", [](SamplingParams& p) { p.stop = {std::string(1025, 'a')}; },
         [](SamplingParams& p) { p.stop = {std::string(1024, 'a')}; }},
        {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {1, 4096}; },
         [](SamplingParams& p) { p.stop_token_ids = {1, 4095}; }},
        {"n",
         [](SamplingParams& p) {
             p.temperature = 0.0f;
             p.n = 2;
         },
         [](SamplingParams& p) {
             p.temperature = 0.01f;
             p.n = 2;
         }},
    };
    SamplingLimits limits;
    limits.vocab_size = 4096;
    for (const auto& c : cases) {
        CAPTURE(c.param);
        CHECK(rejected_param(with(c.bad), limits) == c.param);
        CHECK(rejected_param(with(c.edge_ok), limits) == "");
    }
}

TEST_CASE("limits are configurable") {
    SamplingLimits l;
    l.max_n = 4;
    l.max_logprobs = 5;
    CHECK(rejected_param(with([](SamplingParams& p) { p.n = 5; }), l) == "n");
    CHECK(rejected_param(with([](SamplingParams& p) { p.logprobs = 6; }), l) == "logprobs");
    CHECK(rejected_param(with([](SamplingParams& p) { p.logprobs = 5; }), l) == "");
    // Without a vocabulary size, stop ids are not range-checked.
    CHECK(rejected_param(with([](SamplingParams& p) { p.stop_token_ids = {999999}; })) == "");
}

TEST_CASE("normalisation follows vLLM") {
    SamplingParams p;
    p.top_k = -1;
    p.temperature = 0.001f;
    p.stop_token_ids = {7, 3, 7, 9, 3};
    validate_sampling(p);
    CHECK(p.top_k == 0);
    CHECK(p.temperature == 0.01f);  // tiny temperatures are raised to 0.01
    CHECK(p.stop_token_ids == std::vector<TokenId>{7, 3, 9});

    SamplingParams g;
    g.temperature = 0.0f;
    g.top_p = 0.5f;
    g.top_k = 40;
    g.min_p = 0.2f;
    validate_sampling(g);
    CHECK(g.temperature == 0.0f);  // greedy drops the truncations
    CHECK(g.top_p == 1.0f);
    CHECK(g.top_k == 0);
    CHECK(g.min_p == 0.0f);
}

TEST_CASE("finish reasons have their vLLM names") {
    CHECK(std::string(finish_reason_name(FinishReason::stop)) == "stop");
    CHECK(std::string(finish_reason_name(FinishReason::length)) == "length");
    CHECK(std::string(finish_reason_name(FinishReason::abort)) == "abort");
    CHECK(std::string(finish_reason_name(FinishReason::error)) == "error");
}
