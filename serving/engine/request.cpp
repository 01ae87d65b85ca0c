#include "serving/engine/request.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

namespace kiln::serving {

InvalidRequest::InvalidRequest(std::string param, const std::string& message)
    : InvalidArgument(message), param_(std::move(param)) {}

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::stop: return "stop";
        case FinishReason::length: return "length";
        case FinishReason::abort: return "abort";
        case FinishReason::error: return "error";
    }
    return "error";
}

namespace {

[[noreturn]] void bad(const char* param, const std::string& message) { throw InvalidRequest(param, message); }

void check_finite(const char* param, float v) {
    if (!std::isfinite(v)) bad(param, fmt::format("{} must be a finite number, got {}", param, v));
}

}  // namespace

void validate_sampling(SamplingParams& p, const SamplingLimits& limits) {
    if (p.n < 1) bad("n", fmt::format("n must be at least 1, got {}", p.n));
    if (p.n > limits.max_n) bad("n", fmt::format("n must be at most {}, got {}", limits.max_n, p.n));
    check_finite("presence_penalty", p.presence_penalty);
    if (p.presence_penalty < -2.0f || p.presence_penalty > 2.0f)
        bad("presence_penalty", fmt::format("presence_penalty must be in [-2, 2], got {}", p.presence_penalty));
    check_finite("frequency_penalty", p.frequency_penalty);
    if (p.frequency_penalty < -2.0f || p.frequency_penalty > 2.0f)
        bad("frequency_penalty", fmt::format("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty));
    check_finite("repetition_penalty", p.repetition_penalty);
    if (p.repetition_penalty <= 0.0f)
        bad("repetition_penalty",
            fmt::format("repetition_penalty must be greater than zero, got {}", p.repetition_penalty));
    check_finite("temperature", p.temperature);
    if (p.temperature < 0.0f)
        bad("temperature", fmt::format("temperature must be non-negative, got {}", p.temperature));
    if (p.temperature > 2.0f) bad("temperature", fmt::format("temperature must be in [0, 2], got {}", p.temperature));
    check_finite("top_p", p.top_p);
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p", fmt::format("top_p must be in (0, 1], got {}", p.top_p));
    if (p.top_k < -1) bad("top_k", fmt::format("top_k must be 0 or -1 (disable), or at least 1, got {}", p.top_k));
    check_finite("min_p", p.min_p);
    if (p.min_p < 0.0f || p.min_p > 1.0f) bad("min_p", fmt::format("min_p must be in [0, 1], got {}", p.min_p));
    if (p.max_tokens < 1) bad("max_tokens", fmt::format("max_tokens must be at least 1, got {}", p.max_tokens));
    if (p.min_tokens > p.max_tokens)
        bad("min_tokens",
            fmt::format("min_tokens must be less than or equal to max_tokens={}, got {}", p.max_tokens, p.min_tokens));
    if (p.logprobs && *p.logprobs > limits.max_logprobs)
        bad("logprobs", fmt::format("requested {} logprobs per token, more than the maximum of {}", *p.logprobs,
                                    limits.max_logprobs));
    if (p.stop.size() > limits.max_stop_strings)
        bad("stop",
            fmt::format("stop has {} strings, more than the maximum of {}", p.stop.size(), limits.max_stop_strings));
    for (const auto& s : p.stop) {
        if (s.empty()) bad("stop", "stop cannot contain an empty string");
        if (s.size() > limits.max_stop_bytes)
            bad("stop", fmt::format("a stop string has {} bytes, more than the maximum of {}", s.size(),
                                    limits.max_stop_bytes));
    }
    if (limits.vocab_size > 0) {
        for (TokenId id : p.stop_token_ids)
            if (id >= limits.vocab_size)
                bad("stop_token_ids", fmt::format("stop_token_ids: token id {} is out of the vocabulary (size {})", id,
                                                  limits.vocab_size));
    }
    const bool greedy = p.temperature == 0.0f;
    if (greedy && p.n > 1) bad("n", fmt::format("n must be 1 when using greedy sampling, got {}", p.n));

    if (p.top_k == -1) p.top_k = 0;
    if (p.temperature > 0.0f && p.temperature < 1e-2f) p.temperature = 1e-2f;
    if (greedy) {
        p.top_p = 1.0f;
        p.top_k = 0;
        p.min_p = 0.0f;
    }
    std::unordered_set<TokenId> seen;
    std::erase_if(p.stop_token_ids, [&](TokenId id) { return !seen.insert(id).second; });
}

}  // namespace kiln::serving
