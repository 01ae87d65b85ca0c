#include "serving/http/openai_request.hpp"

#include <fmt/format.h>

#include "serving/http/api_error.hpp"

namespace kiln::serving::http {

namespace {

float float_field(const Fields& f, const char* key, float fallback) {
    auto v = f.number(key);
    return v ? static_cast<float>(*v) : fallback;
}

// A non-negative count that fits in uint32 (`min` is the smallest allowed value).
std::optional<uint32_t> count_field(const Fields& f, const char* key, int64_t min) {
    auto v = f.integer(key);
    if (!v) return std::nullopt;
    if (*v < min) f.fail(key, fmt::format("must be at least {}, got {}", min, *v));
    if (*v > int64_t(UINT32_MAX)) f.fail(key, fmt::format("must be at most {}, got {}", UINT32_MAX, *v));
    return static_cast<uint32_t>(*v);
}

std::vector<TokenId> token_ids(const Json& arr, const std::string& name) {
    std::vector<TokenId> ids;
    ids.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
        auto v = arr[i].is_number() ? as_integer(arr[i]) : std::nullopt;
        if (!v || *v < 0 || *v > int64_t(UINT32_MAX))
            throw ApiError::bad_request(fmt::format("{}[{}]: expected a token id (an integer >= 0), got {}", name, i,
                                                    arr[i].is_number() ? arr[i].dump() : json_kind(arr[i])),
                                        name);
        ids.push_back(static_cast<TokenId>(*v));
    }
    return ids;
}

void refuse_if_set(const Fields& f, const char* key, const char* why) {
    const Json* v = f.get(key);
    if (!v) return;
    const bool set = v->is_boolean()                     ? v->get<bool>()
                     : v->is_string()                    ? !v->get_ref<const std::string&>().empty()
                     : (v->is_object() || v->is_array()) ? !v->empty()
                                                         : true;
    if (set) f.fail(key, why);
}

// Fields both APIs share: sampling, stopping, output options, stream.
void parse_common(const Json& body, const ParseOptions& o, ApiRequest& r) {
    const Fields f(body);
    if (auto m = f.string("model")) r.model = *m;

    SamplingParams& s = r.sampling;
    s = o.defaults;
    if (auto n = count_field(f, "n", 1)) s.n = *n;
    s.temperature = float_field(f, "temperature", s.temperature);
    s.top_p = float_field(f, "top_p", s.top_p);
    if (auto k = f.integer("top_k")) {
        if (*k < -1) f.fail("top_k", fmt::format("must be 0 or -1 (disable), or at least 1, got {}", *k));
        s.top_k = static_cast<int32_t>(std::min<int64_t>(*k, INT32_MAX));
    }
    s.min_p = float_field(f, "min_p", s.min_p);
    s.presence_penalty = float_field(f, "presence_penalty", s.presence_penalty);
    s.frequency_penalty = float_field(f, "frequency_penalty", s.frequency_penalty);
    s.repetition_penalty = float_field(f, "repetition_penalty", s.repetition_penalty);
    if (auto seed = f.integer("seed")) s.seed = *seed == -1 ? std::nullopt : std::optional<int64_t>(*seed);

    if (const Json* stop = f.get("stop")) {
        s.stop.clear();
        if (stop->is_string()) {
            s.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array()) {
            for (size_t i = 0; i < stop->size(); ++i) {
                if (!(*stop)[i].is_string())
                    f.fail("stop", fmt::format("expected a string or a list of strings, item {} is {}", i,
                                               json_kind((*stop)[i])));
                s.stop.push_back((*stop)[i].get<std::string>());
            }
        } else {
            f.wrong_type("stop", "a string or a list of strings", *stop);
        }
    }
    if (const Json* ids = f.array("stop_token_ids")) s.stop_token_ids = token_ids(*ids, "stop_token_ids");
    if (auto b = f.boolean("ignore_eos")) s.ignore_eos = *b;
    if (auto m = count_field(f, "min_tokens", 0)) s.min_tokens = *m;
    if (auto b = f.boolean("skip_special_tokens")) s.skip_special_tokens = *b;
    if (auto b = f.boolean("include_stop_str_in_output")) s.include_stop_str_in_output = *b;

    // max_completion_tokens wins over the older max_tokens (as SGLang; vLLM too for chat).
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
        if (auto m = f.integer(key)) {
            if (*m < 1) throw InvalidRequest(key, fmt::format("{} must be at least 1, got {}", key, *m));
            r.max_tokens = *m;
        }
    }

    if (auto st = f.boolean("stream")) r.stream = *st;
    if (const Json* so = f.object("stream_options")) {
        if (!so->empty() && !r.stream) f.fail("stream_options", "can only be set when stream is true");
        const Fields sf(*so, "stream_options.");
        if (auto b = sf.boolean("include_usage")) r.stream_options.include_usage = *b;
        if (auto b = sf.boolean("continuous_usage_stats")) r.stream_options.continuous_usage_stats = *b;
    }

    refuse_if_set(f, "logit_bias", "is not supported by this server");
    refuse_if_set(f, "prompt_logprobs", "is not supported by this server");
}

void check_response_format(const Fields& f) {
    const Json* rf = f.object("response_format");
    if (!rf) return;
    const Fields rff(*rf, "response_format.");
    auto type = rff.string("type");
    if (!type) f.fail("response_format", "has no \"type\"");
    if (*type == "text" || *type == "json_object") return;
    if (*type == "json_schema") {
        if (!rff.object("json_schema")) f.fail("response_format", "type json_schema needs a \"json_schema\" object");
        return;
    }
    if (*type == "structural_tag") f.fail("response_format", "type structural_tag is not supported by this server");
    f.fail("response_format",
           fmt::format("unknown type '{}' (expected text, json_object, json_schema or structural_tag)", *type));
}

Json check_message(const Json& m, size_t i) {
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object())
        throw ApiError::bad_request(fmt::format("{}: expected an object, got {}", where, json_kind(m)), where);
    const Fields f(m, where + ".");
    auto role = f.string("role");
    if (!role) f.fail("role", "is required");
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" && *role != "tool")
        f.fail("role", fmt::format("unknown role '{}' (expected system, developer, user, assistant or tool)", *role));
    Json out = m;
    if (*role == "developer") out["role"] = "system";

    if (const Json* c = f.get("content")) {
        if (c->is_array()) {
            for (size_t j = 0; j < c->size(); ++j) {
                const Json& part = (*c)[j];
                const std::string pwhere = fmt::format("{}.content[{}]", where, j);
                if (!part.is_object())
                    throw ApiError::bad_request(fmt::format("{}: expected an object, got {}", pwhere, json_kind(part)),
                                                pwhere);
                const Fields pf(part, pwhere + ".");
                auto type = pf.string("type");
                if (!type) pf.fail("type", "is required");
                if (*type == "text") {
                    if (!pf.string("text")) pf.fail("text", "is required");
                } else if (*type == "image_url" || *type == "image" || *type == "input_image" ||
                           *type == "input_audio" || *type == "audio_url" || *type == "video_url" || *type == "file") {
                    throw ApiError::bad_request(
                        fmt::format("{}: {} inputs are not supported by this server (text only)", pwhere, *type),
                        pwhere);
                } else {
                    pf.fail("type", fmt::format("unknown content part type '{}'", *type));
                }
            }
        } else if (!c->is_string()) {
            f.wrong_type("content", "a string or a list of content parts", *c);
        }
    } else if (*role != "assistant") {
        f.fail("content", "is required");
    }
    if (const Json* name = f.get("name"); name && !name->is_string()) f.wrong_type("name", "a string", *name);
    if (const Json* calls = f.array("tool_calls")) {
        for (size_t j = 0; j < calls->size(); ++j) {
            const std::string cwhere = fmt::format("{}.tool_calls[{}]", where, j);
            const Json& call = (*calls)[j];
            const Json* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
            if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
                throw ApiError::bad_request(cwhere + ": expected {\"function\": {\"name\": ..., \"arguments\": ...}}",
                                            cwhere);
        }
    }
    if (const Json* id = f.get("tool_call_id"); id && !id->is_string()) f.wrong_type("tool_call_id", "a string", *id);
    for (const char* key : {"reasoning_content", "reasoning"})
        if (const Json* r = f.get(key); r && !r->is_string()) f.wrong_type(key, "a string", *r);
    if (!f.has("reasoning_content") && f.has("reasoning")) out["reasoning_content"] = out["reasoning"];
    return out;
}

}  // namespace

ApiRequest parse_chat_request(const Json& body, const ParseOptions& o) {
    ApiRequest r;
    r.api = Api::chat;
    parse_common(body, o, r);
    const Fields f(body);

    const Json* messages = f.array("messages");
    if (!messages) f.fail("messages", "is required");
    if (messages->empty()) f.fail("messages", "must not be empty");
    r.chat.messages = Json::array();
    for (size_t i = 0; i < messages->size(); ++i) r.chat.messages.push_back(check_message((*messages)[i], i));

    // logprobs is a boolean here; top_logprobs (0..max) asks for alternatives.
    const bool logprobs = f.boolean("logprobs").value_or(false);
    auto top = f.integer("top_logprobs");
    if (top && *top < 0) f.fail("top_logprobs", fmt::format("must be non-negative, got {}", *top));
    if (top && *top > int64_t(o.limits.max_logprobs))
        f.fail("top_logprobs", fmt::format("must be at most {}, got {}", o.limits.max_logprobs, *top));
    if (top && *top > 0 && !logprobs)
        throw InvalidRequest("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true");
    r.sampling.logprobs = logprobs ? std::optional<uint32_t>(static_cast<uint32_t>(top.value_or(0))) : std::nullopt;

    if (const Json* tools = f.array("tools")) {
        for (size_t i = 0; i < tools->size(); ++i)
            if (!(*tools)[i].is_object())
                f.fail("tools",
                       fmt::format("item {} is {}, expected a tool definition object", i, json_kind((*tools)[i])));
        r.chat.tools = *tools;
    }
    if (const Json* tc = f.get("tool_choice")) {
        if (!tc->is_string() && !tc->is_object()) f.wrong_type("tool_choice", "a string or an object", *tc);
        if (tc->is_string() && *tc != "none" && *tc != "auto" && *tc != "required")
            f.fail("tool_choice",
                   fmt::format("unknown value '{}' (expected none, auto or required)", tc->get<std::string>()));
        r.chat.tool_choice = *tc;
    }
    check_response_format(f);
    if (const Json* rf = f.get("response_format")) r.chat.response_format = *rf;
    if (auto b = f.boolean("add_generation_prompt")) r.chat.add_generation_prompt = *b;
    refuse_if_set(f, "continue_final_message", "is not supported by this server");

    // K3's thinking efforts; "none" (reasoning_effort only) turns thinking off.
    auto effort = [](const Fields& ff, const char* key, bool allow_none) -> std::optional<std::string> {
        auto e = ff.string(key);
        if (e && !(*e == "low" || *e == "high" || *e == "max" || (allow_none && *e == "none")))
            ff.fail(key,
                    fmt::format("unknown value '{}' (expected {}low, high or max)", *e, allow_none ? "none, " : ""));
        return e;
    };
    if (auto e = effort(f, "reasoning_effort", true)) {
        if (*e == "none")
            r.chat.thinking = false;
        else
            r.chat.thinking_effort = *e;
    }
    if (const Json* kw = f.object("chat_template_kwargs")) {
        const Fields kf(*kw, "chat_template_kwargs.");
        if (auto b = kf.boolean("enable_thinking")) r.chat.thinking = *b;
        if (auto b = kf.boolean("thinking")) r.chat.thinking = *b;
        if (auto e = effort(kf, "thinking_effort", false)) r.chat.thinking_effort = *e;
    }
    return r;
}

ApiRequest parse_completion_request(const Json& body, const ParseOptions& o) {
    ApiRequest r;
    r.api = Api::completions;
    parse_common(body, o, r);
    const Fields f(body);

    const Json* prompt = f.get("prompt");
    if (!prompt) f.fail("prompt", "is required");
    auto text_prompt = [&](const Json& p) {
        PromptInput in;
        in.text = p.get<std::string>();
        if (in.text.empty()) f.fail("prompt", "must not be empty");
        return in;
    };
    auto id_prompt = [&](const Json& p) {
        PromptInput in;
        in.is_ids = true;
        in.ids = token_ids(p, "prompt");
        if (in.ids.empty()) f.fail("prompt", "must not be empty");
        return in;
    };
    if (prompt->is_string()) {
        r.prompts.push_back(text_prompt(*prompt));
    } else if (prompt->is_array()) {
        if (prompt->empty()) f.fail("prompt", "must not be empty");
        const Json& first = (*prompt)[0];
        if (first.is_number()) {
            r.prompts.push_back(id_prompt(*prompt));
        } else {
            if (prompt->size() > o.max_prompts)
                f.fail("prompt",
                       fmt::format("has {} prompts, more than the maximum of {}", prompt->size(), o.max_prompts));
            for (size_t i = 0; i < prompt->size(); ++i) {
                const Json& p = (*prompt)[i];
                if (p.is_string())
                    r.prompts.push_back(text_prompt(p));
                else if (p.is_array())
                    r.prompts.push_back(id_prompt(p));
                else
                    f.fail("prompt", fmt::format("item {} is {}; expected a string, a list of strings, a list of token "
                                                 "ids or a list of such lists",
                                                 i, json_kind(p)));
            }
        }
    } else {
        f.wrong_type("prompt", "a string, a list of strings or a list of token ids", *prompt);
    }

    // logprobs is a count here (OpenAI caps it at 5; vLLM at --max-logprobs).
    if (auto lp = f.integer("logprobs")) {
        if (*lp < 0) f.fail("logprobs", fmt::format("must be non-negative, got {}", *lp));
        r.sampling.logprobs = static_cast<uint32_t>(std::min<int64_t>(*lp, UINT32_MAX));
    }
    refuse_if_set(f, "echo", "is not supported by this server");
    refuse_if_set(f, "suffix", "is not supported by this server");
    check_response_format(f);
    if (const Json* rf = f.get("response_format"); rf && (*rf)["type"] != "text")
        f.fail("response_format", "structured output is not supported for completions by this server");
    return r;
}

}  // namespace kiln::serving::http
