// OpenAI response bodies and SSE streams, built from the engine's GenerationEvents.
//
// Choices: a request of P prompts with n sequences each answers P·n choices; choice p·n + i is
// sequence i of prompt p. Keys are written in OpenAI's order (id, object, created, model, choices,
// usage). Streams follow serving-api.md §2:
//   chat:        one role chunk per choice first ({"role":"assistant","content":""}), then one chunk
//                per engine event that carries text (or logprobs), the last one of each choice with
//                its finish_reason (its delta {} when nothing is left), then the usage chunk
//                (choices []) only when include_usage asks, then `data: [DONE]`.
//   completions: no role chunk; choices carry `text` and "logprobs" (null unless asked).
// Every event is `data: <json>\n\n`. Logprobs: chat `logprobs.content[{token, logprob, bytes,
// top_logprobs}]`; completions `{text_offset, token_logprobs, tokens, top_logprobs}` where each
// top_logprobs entry maps token strings to logprobs for the top k plus the chosen token. Token
// strings decode one token (U+FFFD for a partial character); `bytes` are its raw bytes. Logprobs are
// clamped to -9999 (JSON has no -inf), as vLLM does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"
#include "serving/http/api_error.hpp"
#include "serving/http/json_fields.hpp"
#include "serving/http/openai_request.hpp"

namespace kiln::model {
class Tokenizer;
}

namespace kiln::serving::http {

struct ResponseContext {
    Api api = Api::completions;
    std::string id;                  // "chatcmpl-…" or "cmpl-…", the same on every chunk
    int64_t created = 0;             // Unix seconds, the same on every chunk
    std::string model;
    uint32_t n = 1;                  // sequences per prompt
    std::vector<uint64_t> prompt_tokens;  // per prompt
    bool logprobs = false;           // logprobs were requested
    StreamOptions stream_options;
    bool prompt_tokens_details = false;   // add usage.prompt_tokens_details.cached_tokens
    const model::Tokenizer* tokenizer = nullptr;  // for logprob token strings
};

// 32 random hex digits (what vLLM's random_uuid gives), for requests without an X-Request-Id.
std::string random_request_id();
// "chatcmpl-<request id>" / "cmpl-<request id>".
std::string response_id(Api api, const std::string& request_id);

// `data: <json>\n\n` and `data: [DONE]\n\n`.
std::string sse_data(const Json& j);
inline constexpr const char* sse_done = "data: [DONE]\n\n";

// The OpenAI value for a finish that completed normally ("stop" / "length").
const char* openai_finish_reason(FinishReason r);

// {"id", "object", "created", "model"}: the head of a response or (chunk) of a stream chunk.
Json response_head(const ResponseContext& ctx, bool chunk);

// Usage JSON: prompt_tokens, completion_tokens, total_tokens [, prompt_tokens_details].
Json usage_json(const Usage& u, bool prompt_tokens_details);

// State shared by streamed and whole responses: per-choice token counts, text offsets and usage.
class ChoiceState {
public:
    explicit ChoiceState(const ResponseContext& ctx);
    uint32_t choices() const { return static_cast<uint32_t>(tokens_.size()); }
    // Records the event for `choice` and returns its logprobs JSON (null when none were requested).
    Json record(uint32_t choice, const GenerationEvent& e);
    Usage usage() const;

private:
    Api api_;
    bool logprobs_;
    bool details_;
    uint32_t n_;
    std::vector<uint64_t> prompt_tokens_;
    const model::Tokenizer* tokenizer_;
    std::vector<uint64_t> tokens_;
    std::vector<uint64_t> cached_;       // per choice, from its final event
    std::vector<uint64_t> text_offset_;  // completions logprobs: code points so far
};

class StreamEncoder {
public:
    explicit StreamEncoder(ResponseContext ctx);

    std::string begin();  // chat: the role chunks; completions: nothing
    // One chunk, or nothing for an event with no text, no logprobs and no finish. `e.finish` must be
    // stop or length (the caller turns abort / error into error()).
    std::string event(uint32_t choice, const GenerationEvent& e);
    std::string end();    // the usage chunk when asked, then [DONE]
    // An error after the 200: `data: {"error": …}` then [DONE] (what vLLM sends; the openai client raises).
    static std::string error(const ApiError& e);
    Usage usage() const { return state_.usage(); }

private:
    Json chunk(Json choices) const;
    ResponseContext ctx_;
    ChoiceState state_;
};

// Collects a non-streamed response.
class ResponseAccumulator {
public:
    explicit ResponseAccumulator(ResponseContext ctx);
    void event(uint32_t choice, const GenerationEvent& e);  // finish must be stop or length
    bool finished() const;
    Json build() const;  // every choice must have finished
    Usage usage() const { return state_.usage(); }

private:
    struct Choice {
        std::string text;
        Json logprobs;  // chat: array of content entries; completions: the four lists
        const char* finish = nullptr;
    };
    ResponseContext ctx_;
    ChoiceState state_;
    std::vector<Choice> choices_;
};

// GET /v1/models.
Json models_json(const std::vector<std::string>& names, const std::string& root, int64_t created,
                 uint32_t max_model_len);

}  // namespace kiln::serving::http
