#include "serving/http/openai_response.hpp"

#include <algorithm>
#include <charconv>
#include <random>

#include <fmt/format.h>

#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/utf8.hpp"

namespace kiln::serving::http {

namespace {

// A float logprob as the double with the float's shortest decimal form, so -0.1f prints as -0.1.
double json_logprob(float lp) {
    const float v = std::max(lp, -9999.0f);
    const std::string s = fmt::format("{}", v);
    double d = v;
    std::from_chars(s.data(), s.data() + s.size(), d);
    return d;
}

std::string token_string(const model::Tokenizer& tok, TokenId id) {
    const TokenId ids[1] = {id};
    return tok.decode(ids);
}

Json token_bytes(const model::Tokenizer& tok, TokenId id) {
    Json b = Json::array();
    for (unsigned char c : tok.token_bytes(id)) b.push_back(int(c));
    return b;
}

Json chat_logprob_entry(const model::Tokenizer& tok, const TokenLogprob& t) {
    Json j;
    j["token"] = token_string(tok, t.token);
    j["logprob"] = json_logprob(t.logprob);
    j["bytes"] = token_bytes(tok, t.token);
    return j;
}

}  // namespace

std::string random_request_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{:016x}{:016x}", rng(), rng());
}

std::string response_id(Api api, const std::string& request_id) {
    return (api == Api::chat ? "chatcmpl-" : "cmpl-") + request_id;
}

std::string sse_data(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

const char* openai_finish_reason(FinishReason r) { return r == FinishReason::length ? "length" : "stop"; }

Json usage_json(const Usage& u, bool prompt_tokens_details) {
    Json j;
    j["prompt_tokens"] = u.prompt_tokens;
    j["completion_tokens"] = u.completion_tokens;
    j["total_tokens"] = u.total_tokens();
    if (prompt_tokens_details) j["prompt_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
    return j;
}

Json response_head(const ResponseContext& ctx, bool chunk) {
    Json j;
    j["id"] = ctx.id;
    j["object"] = ctx.api == Api::completions ? "text_completion" : chunk ? "chat.completion.chunk" : "chat.completion";
    j["created"] = ctx.created;
    j["model"] = ctx.model;
    return j;
}

// ---- ChoiceState ----

ChoiceState::ChoiceState(const ResponseContext& ctx)
    : api_(ctx.api),
      logprobs_(ctx.logprobs),
      details_(ctx.prompt_tokens_details),
      n_(ctx.n),
      prompt_tokens_(ctx.prompt_tokens),
      tokenizer_(ctx.tokenizer),
      tokens_(ctx.prompt_tokens.size() * ctx.n, 0),
      cached_(tokens_.size(), 0),
      text_offset_(tokens_.size(), 0) {}

Json ChoiceState::record(uint32_t choice, const GenerationEvent& e) {
    tokens_.at(choice) += e.tokens.size();
    if (e.finish) cached_[choice] = e.cached_prompt_tokens;
    if (!logprobs_) return nullptr;
    const model::Tokenizer& tok = *tokenizer_;
    if (api_ == Api::chat) {
        Json content = Json::array();
        for (const auto& lp : e.logprobs) {
            Json entry = chat_logprob_entry(tok, lp.chosen);
            Json top = Json::array();
            for (const auto& t : lp.top) top.push_back(chat_logprob_entry(tok, t));
            entry["top_logprobs"] = std::move(top);
            content.push_back(std::move(entry));
        }
        return content;
    }
    Json offsets = Json::array(), lps = Json::array(), toks = Json::array(), tops = Json::array();
    for (const auto& lp : e.logprobs) {
        const std::string s = token_string(tok, lp.chosen.token);
        offsets.push_back(text_offset_[choice]);
        text_offset_[choice] += model::utf8::length(s);
        lps.push_back(json_logprob(lp.chosen.logprob));
        toks.push_back(s);
        Json top = Json::object();
        for (const auto& t : lp.top) top[token_string(tok, t.token)] = json_logprob(t.logprob);
        top[s] = json_logprob(lp.chosen.logprob);
        tops.push_back(std::move(top));
    }
    Json j;
    j["text_offset"] = std::move(offsets);
    j["token_logprobs"] = std::move(lps);
    j["tokens"] = std::move(toks);
    j["top_logprobs"] = std::move(tops);
    return j;
}

Usage ChoiceState::usage() const {
    Usage u;
    for (size_t p = 0; p < prompt_tokens_.size(); ++p) {
        u.prompt_tokens += prompt_tokens_[p];
        uint64_t cached = 0;
        for (uint32_t i = 0; i < n_; ++i) cached = std::max(cached, cached_[p * n_ + i]);
        u.cached_tokens += cached;
    }
    for (uint64_t t : tokens_) u.completion_tokens += t;
    return u;
}

// ---- StreamEncoder ----

StreamEncoder::StreamEncoder(ResponseContext ctx) : ctx_(std::move(ctx)), state_(ctx_) {}

Json StreamEncoder::chunk(Json choices) const {
    Json j = response_head(ctx_, true);
    j["choices"] = std::move(choices);
    if (ctx_.stream_options.continuous_usage_stats) j["usage"] = usage_json(state_.usage(), ctx_.prompt_tokens_details);
    return j;
}

std::string StreamEncoder::begin() {
    if (ctx_.api != Api::chat) return {};
    std::string out;
    for (uint32_t c = 0; c < state_.choices(); ++c) {
        Json choice;
        choice["index"] = c;
        choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
        if (ctx_.logprobs) choice["logprobs"] = nullptr;
        choice["finish_reason"] = nullptr;
        out += sse_data(chunk(Json::array({std::move(choice)})));
    }
    return out;
}

std::string StreamEncoder::event(uint32_t choice, const GenerationEvent& e) {
    Json logprobs = state_.record(choice, e);
    const bool has_logprobs = ctx_.logprobs && !e.logprobs.empty();
    if (e.text.empty() && !has_logprobs && !e.finish) return {};
    Json c;
    c["index"] = choice;
    if (ctx_.api == Api::chat) {
        Json delta = Json::object();
        if (!e.text.empty() || !e.finish) delta["content"] = e.text;
        c["delta"] = std::move(delta);
        if (ctx_.logprobs) c["logprobs"] = has_logprobs ? Json{{"content", std::move(logprobs)}} : Json();
    } else {
        c["text"] = e.text;
        c["logprobs"] = has_logprobs ? std::move(logprobs) : Json();
    }
    c["finish_reason"] = e.finish ? Json(openai_finish_reason(*e.finish)) : Json();
    return sse_data(chunk(Json::array({std::move(c)})));
}

std::string StreamEncoder::end() {
    std::string out;
    if (ctx_.stream_options.include_usage) {
        Json j = response_head(ctx_, true);
        j["choices"] = Json::array();
        j["usage"] = usage_json(state_.usage(), ctx_.prompt_tokens_details);
        out += sse_data(j);
    }
    out += sse_done;
    return out;
}

std::string StreamEncoder::error(const ApiError& e) { return sse_data(e.to_json()) + sse_done; }

// ---- ResponseAccumulator ----

ResponseAccumulator::ResponseAccumulator(ResponseContext ctx)
    : ctx_(std::move(ctx)), state_(ctx_), choices_(state_.choices()) {}

void ResponseAccumulator::event(uint32_t choice, const GenerationEvent& e) {
    Json lp = state_.record(choice, e);
    Choice& c = choices_.at(choice);
    c.text += e.text;
    if (ctx_.logprobs) {
        if (ctx_.api == Api::chat) {
            if (c.logprobs.is_null()) c.logprobs = Json::array();
            for (auto& entry : lp) c.logprobs.push_back(std::move(entry));
        } else if (c.logprobs.is_null()) {
            c.logprobs = std::move(lp);
        } else {
            for (const char* key : {"text_offset", "token_logprobs", "tokens", "top_logprobs"})
                for (auto& v : lp[key]) c.logprobs[key].push_back(std::move(v));
        }
    }
    if (e.finish) c.finish = openai_finish_reason(*e.finish);
}

bool ResponseAccumulator::finished() const {
    return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finish != nullptr; });
}

Json ResponseAccumulator::build() const {
    Json choices = Json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        Json j;
        j["index"] = i;
        if (ctx_.api == Api::chat) {
            j["message"] = Json{{"role", "assistant"}, {"content", c.text}};
            if (ctx_.logprobs) {
                Json content = c.logprobs.is_null() ? Json::array() : c.logprobs;
                j["logprobs"] = Json{{"content", std::move(content)}};
            } else {
                j["logprobs"] = nullptr;
            }
        } else {
            j["text"] = c.text;
            j["logprobs"] = c.logprobs;
        }
        j["finish_reason"] = c.finish ? Json(c.finish) : Json();
        choices.push_back(std::move(j));
    }
    Json j = response_head(ctx_, false);
    j["choices"] = std::move(choices);
    j["usage"] = usage_json(state_.usage(), ctx_.prompt_tokens_details);
    return j;
}

// ---- /v1/models ----

Json models_json(const std::vector<std::string>& names, const std::string& root, int64_t created,
                 uint32_t max_model_len) {
    Json data = Json::array();
    for (const auto& name : names) {
        Json m;
        m["id"] = name;
        m["object"] = "model";
        m["created"] = created;
        m["owned_by"] = "kiln";
        m["root"] = root.empty() ? name : root;
        m["parent"] = nullptr;
        m["max_model_len"] = max_model_len;
        data.push_back(std::move(m));
    }
    return Json{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace kiln::serving::http
