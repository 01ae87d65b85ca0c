// From an HTTP request body to what the engine and the response builders need: the body parsed
// (openai_request.hpp), prompts rendered and tokenized, max_tokens fitted, sampling validated (every
// failure an ApiError / InvalidRequest naming the field), one GenerationRequest per prompt and the
// ResponseContext of the answer. Needs no engine.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"
#include "serving/http/openai_request.hpp"
#include "serving/http/openai_response.hpp"
#include "serving/http/served_model.hpp"

namespace kiln::serving::http {

// Per-request bounds and options (each meant to be a `kiln serve` flag with a KILN_* variable).
struct RequestLimits {
    uint32_t max_n = 128;               // --max-n: sequences per prompt
    uint32_t max_logprobs = 20;         // --max-logprobs (vLLM's default)
    size_t max_prompts = 256;           // --max-prompts: completions prompts per request
    size_t max_prompt_tokens = 0;       // --max-prompt-tokens; 0: the context length is the only limit
    bool prompt_tokens_details = false; // --enable-prompt-tokens-details: usage.prompt_tokens_details
};

struct PreparedGeneration {
    ApiRequest request;
    std::vector<GenerationRequest> engine_requests;  // prompt p's id is `request_id` (one prompt) or `request_id-p`
    ResponseContext response;
};

PreparedGeneration prepare_generation(Api api, const Json& body, const ServedModel& model, const RequestLimits& limits,
                                      const std::string& request_id,
                                      std::chrono::steady_clock::time_point arrival);

}  // namespace kiln::serving::http
