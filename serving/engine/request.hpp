// The contract between the HTTP front end and the serving engine: what a generation request asks
// for, what the engine streams back, and the Engine interface the front end calls.
//
// Lifecycle. The front end parses and validates a request (validate_sampling), renders and
// tokenizes the prompt, clamps max_tokens to the context and calls Engine::submit with a sink. The
// engine generates `sampling.n` sequences from the one prompt and streams GenerationEvents to the
// sink from its own thread: per sequence, zero or more token events, then exactly one final event
// (`finish` set). That final event comes in every case: normal ends, cancel(), preemption that
// cannot be recovered, engine errors and shutdown. After the last sequence's final event the engine
// holds nothing of the request (KV pages, state slots, queue entries) and drops the sink.
//
// Text. The engine detokenizes incrementally (model::StreamDecoder semantics: never half a UTF-8
// character) and applies stop strings, so `text` is final: the concatenation of a sequence's texts
// is its output. Text that might still turn out to be the start of a stop string is held back
// until it cannot; a matched stop string and everything after it is cut (kept with
// include_stop_str_in_output).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace kiln::model {
class Tokenizer;
}

namespace kiln::serving {

using TokenId = uint32_t;

// A request field out of range or inconsistent with another. param() names the field as the
// OpenAI API spells it ("temperature", "stop_token_ids", "messages[1].content"); what() is one line
// that starts with it.
class InvalidRequest : public InvalidArgument {
public:
    InvalidRequest(std::string param, const std::string& message);
    const std::string& param() const { return param_; }

private:
    std::string param_;
};

// submit() refused the request because the engine's bounded waiting queue is full. Nothing was
// queued; the client may retry (HTTP 429).
class Overloaded : public Error {
public:
    using Error::Error;
};

// submit() refused the request because the engine takes no work now: still loading, draining for
// shutdown, or failed (HTTP 503).
class Unavailable : public Error {
public:
    using Error::Error;
};

// Per-request sampling and stopping, with vLLM's meanings and "off" values.
struct SamplingParams {
    uint32_t n = 1;                    // sequences sampled independently from the one prompt
    float temperature = 1.0f;          // 0: greedy (argmax)
    float top_p = 1.0f;                // nucleus mass in (0, 1]; 1: off
    int32_t top_k = 0;                 // 0: off (-1, SGLang's "off", is normalised to 0)
    float min_p = 0.0f;                // drop tokens below min_p * p(most likely); 0: off
    float presence_penalty = 0.0f;     // subtracted once from the logit of every token already generated
    float frequency_penalty = 0.0f;    // subtracted per occurrence in the generated tokens
    float repetition_penalty = 1.0f;   // tokens of prompt or output: logit / p if > 0, * p if < 0; 1: off
    std::optional<int64_t> seed;       // sequence i samples with seed + i; unset: nondeterministic
    std::vector<std::string> stop;     // stop strings, matched on the detokenized text
    std::vector<TokenId> stop_token_ids;  // finish "stop" when sampled (the token counts and is returned)
    bool ignore_eos = false;           // keep generating past the model's EOS ids
    uint32_t min_tokens = 0;           // no stop of any kind (EOS, ids, strings) before this many tokens
    uint32_t max_tokens = 16;          // generated tokens per sequence; the front end fits it to the context
    // Logprobs: unset returns none; k returns, per generated token, the log-softmax of the raw logits
    // (before temperature, penalties and truncation: vLLM's default) for the chosen token and the k
    // most likely tokens.
    std::optional<uint32_t> logprobs;
    bool skip_special_tokens = true;   // special tokens produce no text (their ids are still returned)
    bool include_stop_str_in_output = false;
};

// Server-side bounds used by validate_sampling.
struct SamplingLimits {
    uint32_t max_n = 128;
    uint32_t max_logprobs = 20;        // vLLM's --max-logprobs default
    uint32_t vocab_size = 0;           // stop_token_ids must be below it; 0: unchecked
    size_t max_stop_strings = 64;
    size_t max_stop_bytes = 1024;      // per stop string
};

// Checks every field against vLLM's ranges and the limits, throwing InvalidRequest that names the
// first bad field: n >= 1 (and n = 1 when greedy, i.e. temperature 0); presence and frequency
// penalties in [-2, 2], repetition penalty > 0; temperature in [0, 2]; top_p in (0, 1]; top_k >= -1;
// min_p in [0, 1]; max_tokens >= 1; min_tokens <= max_tokens; no empty stop string; logprobs <=
// max_logprobs. Then normalises in place as vLLM does: top_k -1 -> 0, temperature in (0, 0.01) ->
// 0.01, greedy drops top_p / top_k / min_p, duplicate stop ids removed.
void validate_sampling(SamplingParams& params, const SamplingLimits& limits = {});

struct GenerationRequest {
    std::string id;                     // unique among live requests; shows up in logs
    std::vector<TokenId> prompt;        // rendered and tokenized; 1 <= size < max_model_len
    SamplingParams sampling;            // validated; prompt.size() + max_tokens <= max_model_len
    std::chrono::steady_clock::time_point arrival;  // when the front end received it (queue time starts here)
};

struct TokenLogprob {
    TokenId token = 0;
    float logprob = 0.0f;
};

struct TokenLogprobs {
    TokenLogprob chosen;                // the sampled token
    std::vector<TokenLogprob> top;      // the `logprobs` most likely tokens, most likely first
};

enum class FinishReason : uint8_t {
    stop,    // EOS, a stop token id or a stop string
    length,  // max_tokens reached (or the context is full)
    abort,   // cancelled, or dropped at shutdown
    error,   // the engine failed this request; `error` says why
};

const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

struct GenerationEvent {
    uint32_t index = 0;                 // the sequence, 0..n-1
    std::vector<TokenId> tokens;        // committed this step (several with speculative decoding)
    std::string text;                   // text made final by them (may be empty; valid UTF-8)
    std::vector<TokenLogprobs> logprobs;  // one per token when sampling.logprobs is set, else empty
    std::optional<FinishReason> finish; // set on the sequence's last event only
    std::optional<std::string> stop_string;  // finish stop by a stop string: the one matched
    std::optional<TokenId> stop_token;  // finish stop by a stop id or EOS: that id
    std::string error;                  // finish error / abort: the reason, one line
    uint32_t cached_prompt_tokens = 0;  // on the final event: prompt tokens served from the prefix cache
};

// Token counts of one API response (summed over its sequences).
struct Usage {
    uint64_t prompt_tokens = 0;
    uint64_t completion_tokens = 0;
    uint64_t cached_tokens = 0;         // of prompt_tokens, served from the prefix cache
    uint64_t total_tokens() const { return prompt_tokens + completion_tokens; }
};

// Receives a request's events. on_event runs on the engine's thread, in order per sequence; it must
// return quickly, never block and never call into the engine.
class EventSink {
public:
    virtual ~EventSink() = default;
    virtual void on_event(GenerationEvent&& event) = 0;
};

using RequestHandle = uint64_t;

// A consistent snapshot of the engine's load; counters are monotonic since start-up.
struct EngineStats {
    uint32_t running = 0;                   // sequences scheduled for prefill or decode (a request counts n)
    uint32_t waiting = 0;                   // sequences queued, preempted ones included
    double kv_usage = 0.0;                  // fraction of KV pages in use, 0..1
    double state_usage = 0.0;               // fraction of recurrent-state (KDA) slots in use, 0..1
    uint64_t prefix_cache_queries = 0;      // prompt tokens looked up in the prefix cache
    uint64_t prefix_cache_hits = 0;         // of those, tokens whose state came from the cache
    uint64_t preemptions = 0;
    uint64_t spec_drafts = 0;               // speculative decoding: verify rounds,
    uint64_t spec_draft_tokens = 0;         // tokens proposed,
    uint64_t spec_accepted_tokens = 0;      // and tokens accepted
};

struct EngineInfo {
    std::string model_name;                 // the default served name
    uint32_t max_model_len = 0;             // prompt + generated tokens per sequence
};

// The serving engine as the front end sees it. Every method is thread-safe.
class Engine {
public:
    virtual ~Engine() = default;

    // Queues the request and returns its handle; events go to `sink` (possibly before submit
    // returns). Throws Overloaded when the waiting queue is full, Unavailable when not ready or
    // draining, InvalidRequest when the request can never run (e.g. it needs more KV than exists).
    // Nothing is queued when it throws.
    virtual RequestHandle submit(GenerationRequest request, std::shared_ptr<EventSink> sink) = 0;

    // Stops the request at once and frees its memory; its unfinished sequences get a final abort
    // event. Idempotent; a finished or unknown handle is ignored.
    virtual void cancel(RequestHandle handle) = 0;

    virtual bool ready() const = 0;         // weights loaded, taking requests
    virtual EngineStats stats() const = 0;
    virtual EngineInfo info() const = 0;
    // The tokenizer the engine detokenizes with (the front end encodes prompts with it).
    virtual const model::Tokenizer& tokenizer() const = 0;
};

}  // namespace kiln::serving
