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

struct RequestLimits {
    uint32_t max_n = 128;
    uint32_t max_logprobs = 20;
    size_t max_prompts = 256;
    size_t max_prompt_tokens = 0;       // 0: the context length is the only limit
    bool prompt_tokens_details = false;
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
