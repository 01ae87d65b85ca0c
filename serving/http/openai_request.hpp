// Parsing and validating the bodies of POST /v1/chat/completions and /v1/completions.
//
// Every field serving-api.md lists is read with its type checked; wrong types and out-of-range
// values throw ApiError 400 naming the field (sampling ranges are vLLM's, see validate_sampling).
// Unknown fields are ignored (bench clients send best_of, user, ...). Fields kiln knows but cannot
// honour are refused rather than silently dropped: logit_bias, echo, suffix, prompt_logprobs,
// continue_final_message, image / audio content, and structured output (response_format
// json_object / json_schema is rendered into K3 prompts as K3's own encoder does, and refused
// elsewhere; structural_tag everywhere). Parsing needs no model: prompt rendering and fitting
// max_tokens to the context come after (prompt.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"
#include "serving/http/json_fields.hpp"

namespace kiln::serving::http {

enum class Api { chat, completions };

struct StreamOptions {
    bool include_usage = false;           // one usage chunk before [DONE] (absent from {}: OpenAI / SGLang)
    bool continuous_usage_stats = false;  // usage on every chunk (vLLM extension)
};

// What the chat renderer needs. `messages` is a validated copy: every message an object with a known
// role ("developer" rewritten to "system"), content a string, text parts or null, `reasoning`
// copied to `reasoning_content`.
struct ChatInput {
    Json messages;
    Json tools;            // null or an array of tool definitions
    Json tool_choice;      // null, "none", "auto", "required" or a named-function object
    Json response_format;  // null or an object with a "type"
    bool add_generation_prompt = true;
    std::optional<bool> thinking;              // chat_template_kwargs.thinking / enable_thinking;
                                               // reasoning_effort "none" turns it off
    std::optional<std::string> thinking_effort;  // chat_template_kwargs.thinking_effort or reasoning_effort
};

// One completions prompt: text, or token ids.
struct PromptInput {
    bool is_ids = false;
    std::string text;
    std::vector<TokenId> ids;
};

struct ApiRequest {
    Api api = Api::completions;
    std::optional<std::string> model;
    // Parsed but not yet validated: validate_sampling runs once max_tokens is fitted to the prompt.
    SamplingParams sampling;
    // max_completion_tokens, else max_tokens, as given (unset: the rest of the context for chat, 16
    // for completions); negative values are refused here.
    std::optional<int64_t> max_tokens;
    bool stream = false;
    StreamOptions stream_options;
    ChatInput chat;                    // Api::chat
    std::vector<PromptInput> prompts;  // Api::completions: one or more (a batch answers prompts × n choices)
};

struct ParseOptions {
    SamplingParams defaults;           // unset sampling fields take these (a generation config's)
    SamplingLimits limits;             // only max_logprobs is used here (for top_logprobs)
    size_t max_prompts = 256;          // completions prompts per request
};

ApiRequest parse_chat_request(const Json& body, const ParseOptions& options = {});
ApiRequest parse_completion_request(const Json& body, const ParseOptions& options = {});

}  // namespace kiln::serving::http
