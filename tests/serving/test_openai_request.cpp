// Request parsing and validation for /v1/chat/completions and /v1/completions: every field of
// serving-api.md, valid and invalid, through the whole request path (parse, render, fit, validate),
// each refusal a 400 naming the field; plus the body parser and the error shape.
#include "tests/serving/http_test_support.hpp"

#include "model/tokenizer/chat_k2.hpp"
#include "model/tokenizer/chat_k3.hpp"
#include "serving/http/prompt.hpp"

using namespace kiln::serving;
using namespace kiln::serving::http;
using namespace kiln::serving::http::test;
using ojson = nlohmann::ordered_json;

namespace {

// A chat body with one user message plus `extra` fields ("" for none).
std::string chat(const std::string& extra) {
    std::string b = R"({"model": "k3-tiny", "messages": [{"role": "user", "content": "hello there"}])";
    if (!extra.empty()) b += ", " + extra;
    return b + "}";
}

std::string completion(const std::string& extra, const std::string& prompt = R"("once upon a time")") {
    std::string b = R"({"model": "k3-tiny", "prompt": )" + prompt;
    if (!extra.empty()) b += ", " + extra;
    return b + "}";
}

const ServedModel& model() {
    static const ServedModel m = k3_model();
    return m;
}

// Asserts `body` is refused with a 400 naming `param` (in the param and in the message).
void check_refused(Api api, const std::string& body, const std::string& param) {
    CAPTURE(body);
    const Refusal r = refusal(api, body, model());
    CHECK(r.status == 400);
    CHECK(r.param == param);
    CHECK_MESSAGE(r.message.find(param) != std::string::npos, r.message);
}

void check_accepted(Api api, const std::string& body) {
    CAPTURE(body);
    const Refusal r = refusal(api, body, model());
    CHECK_MESSAGE(r.status == 0, r.message);
}

}  // namespace

TEST_CASE("the request body parser refuses what is not one JSON object") {
    for (const std::string& bad :
         {std::string(""), std::string("not json"), std::string("{\"a\": 1"), std::string("[1, 2]"),
          std::string("\"text\""), std::string("{} trailing"), std::string("{\"a\": \"\xff\xfe\"}"),
          std::string("{\"a\": \"\xc3\"}"), std::string("{\"a\": NaN}"), std::string("{'a': 1}")}) {
        CAPTURE(bad);
        try {
            parse_json_object(bad);
            FAIL("accepted");
        } catch (const ApiError& e) {
            CHECK(e.status() == 400);
        }
    }
    // Nesting: 64 levels parse, 65 do not (the parser never recurses into an unbounded depth).
    auto nested = [](int depth) {
        return "{\"a\": " + std::string(size_t(depth - 1), '[') + std::string(size_t(depth - 1), ']') + "}";
    };
    CHECK_NOTHROW(parse_json_object(nested(64)));
    CHECK_THROWS_AS(parse_json_object(nested(65)), ApiError);
    CHECK_THROWS_AS(parse_json_object(std::string(1 << 20, '[')), ApiError);
    CHECK(parse_json_object(R"({"k": "caf\u00e9 \ud83d\ude00"})")["k"] == "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST_CASE("errors have OpenAI's nested shape") {
    CHECK(ApiError::bad_request("temperature: must be in [0, 2], got 3", "temperature").body() ==
          R"({"error":{"message":"temperature: must be in [0, 2], got 3","type":"invalid_request_error",)"
          R"("param":"temperature","code":null}})");
    CHECK(ApiError(401, "Incorrect API key provided", {}, "invalid_api_key").body() ==
          R"({"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,)"
          R"("code":"invalid_api_key"}})");
    CHECK(std::string(ApiError(429, "busy").type()) == "rate_limit_error");
    CHECK(std::string(ApiError(503, "loading").type()) == "server_error");
    CHECK(std::string(ApiError(500, "bug").type()) == "server_error");
    CHECK(std::string(ApiError(404, "no such model").type()) == "invalid_request_error");
}

TEST_CASE("chat: sampling fields, valid and invalid") {
    const Api c = Api::chat;
    check_accepted(c, chat(""));
    check_accepted(c, chat(R"("temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 1,
                              "frequency_penalty": -1.5, "repetition_penalty": 1.1, "seed": 7, "n": 3)"));
    check_refused(c, chat(R"("temperature": "hot")"), "temperature");
    check_refused(c, chat(R"("temperature": 2.5)"), "temperature");
    check_refused(c, chat(R"("temperature": -0.5)"), "temperature");
    check_refused(c, chat(R"("temperature": 1e300)"), "temperature");           // beyond float: not finite
    CHECK(refusal(c, chat(R"("temperature": 1e400)"), model()).status == 400);  // beyond double: bad JSON
    check_refused(c, chat(R"("top_p": 0)"), "top_p");
    check_refused(c, chat(R"("top_p": true)"), "top_p");
    check_refused(c, chat(R"("top_p": 1.5)"), "top_p");
    check_accepted(c, chat(R"("top_k": -1)"));
    check_accepted(c, chat(R"("top_k": 0)"));
    check_accepted(c, chat(R"("top_k": 5.0)"));
    check_refused(c, chat(R"("top_k": -2)"), "top_k");
    check_refused(c, chat(R"("top_k": 1.5)"), "top_k");
    check_refused(c, chat(R"("top_k": "5")"), "top_k");
    check_refused(c, chat(R"("min_p": 2)"), "min_p");
    check_refused(c, chat(R"("min_p": -0.1)"), "min_p");
    check_refused(c, chat(R"("presence_penalty": 2.5)"), "presence_penalty");
    check_refused(c, chat(R"("presence_penalty": [1])"), "presence_penalty");
    check_refused(c, chat(R"("frequency_penalty": -3)"), "frequency_penalty");
    check_refused(c, chat(R"("repetition_penalty": 0)"), "repetition_penalty");
    check_refused(c, chat(R"("repetition_penalty": -1)"), "repetition_penalty");
    check_refused(c, chat(R"("n": 0)"), "n");
    check_refused(c, chat(R"("n": -1)"), "n");
    check_refused(c, chat(R"("n": 1.5)"), "n");
    check_refused(c, chat(R"("n": 129)"), "n");
    check_refused(c, chat(R"("n": 99999999999)"), "n");
    check_refused(c, chat(R"("n": 2, "temperature": 0)"), "n");
    check_accepted(c, chat(R"("seed": -1)"));
    check_accepted(c, chat(R"("seed": -9223372036854775808)"));
    check_refused(c, chat(R"("seed": 1.5)"), "seed");
    check_refused(c, chat(R"("seed": "42")"), "seed");
    check_refused(c, chat(R"("seed": 1e30)"), "seed");
    check_refused(c, chat(R"("seed": 18446744073709551615)"), "seed");
}

TEST_CASE("chat: stopping and length fields, valid and invalid") {
    const Api c = Api::chat;
    check_accepted(c, chat(R"("stop": "\n\n")"));
    check_accepted(c, chat(R"("stop": ["a", "b"], "stop_token_ids": [1, 2, 4095], "ignore_eos": true,
                              "min_tokens": 2, "max_tokens": 8, "skip_special_tokens": false,
                              "include_stop_str_in_output": true)"));
    check_refused(c, chat(R"("stop": [""])"), "stop");
    check_refused(c, chat(R"("stop": [1])"), "stop");
    check_refused(c, chat(R"("stop": 5)"), "stop");
    check_refused(c, chat(R"("stop_token_ids": [-1])"), "stop_token_ids");
    check_refused(c, chat(R"("stop_token_ids": [4096])"), "stop_token_ids");
    check_refused(c, chat(R"("stop_token_ids": "1")"), "stop_token_ids");
    check_refused(c, chat(R"("ignore_eos": "yes")"), "ignore_eos");
    check_refused(c, chat(R"("min_tokens": -1)"), "min_tokens");
    check_refused(c, chat(R"("min_tokens": 9, "max_tokens": 8)"), "min_tokens");
    check_refused(c, chat(R"("skip_special_tokens": 1)"), "skip_special_tokens");
    check_refused(c, chat(R"("include_stop_str_in_output": "no")"), "include_stop_str_in_output");
    check_refused(c, chat(R"("max_tokens": 0)"), "max_tokens");
    check_refused(c, chat(R"("max_tokens": -3)"), "max_tokens");
    check_refused(c, chat(R"("max_tokens": "8")"), "max_tokens");
    check_refused(c, chat(R"("max_completion_tokens": 0)"), "max_completion_tokens");
    check_refused(c, chat(R"("max_completion_tokens": 2.5)"), "max_completion_tokens");
}

TEST_CASE("chat: logprobs, stream, structured output and extensions") {
    const Api c = Api::chat;
    check_accepted(c, chat(R"("logprobs": true, "top_logprobs": 20)"));
    check_accepted(c, chat(R"("logprobs": false, "top_logprobs": 0)"));
    check_refused(c, chat(R"("logprobs": 1)"), "logprobs");
    check_refused(c, chat(R"("top_logprobs": 3)"), "top_logprobs");
    check_refused(c, chat(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs");
    check_refused(c, chat(R"("logprobs": true, "top_logprobs": -1)"), "top_logprobs");
    check_accepted(
        c, chat(R"("stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true})"));
    check_accepted(c, chat(R"("stream": false, "stream_options": {})"));
    check_refused(c, chat(R"("stream": "yes")"), "stream");
    check_refused(c, chat(R"("stream_options": {"include_usage": true})"), "stream_options");
    check_refused(c, chat(R"("stream": true, "stream_options": 1)"), "stream_options");
    check_refused(c, chat(R"("stream": true, "stream_options": {"include_usage": "yes"})"),
                  "stream_options.include_usage");
    check_accepted(c, chat(R"("response_format": {"type": "text"})"));
    check_accepted(c, chat(R"("response_format": {"type": "json_object"})"));
    check_accepted(c,
                   chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})"));
    check_refused(c, chat(R"("response_format": {"type": "json_schema"})"), "response_format");
    check_refused(c, chat(R"("response_format": {"type": "structural_tag"})"), "response_format");
    check_refused(c, chat(R"("response_format": {"type": "xml"})"), "response_format");
    check_refused(c, chat(R"("response_format": "json")"), "response_format");
    check_accepted(c, chat(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                              "tool_choice": "required")"));
    check_refused(c, chat(R"("tools": "f")"), "tools");
    check_refused(c, chat(R"("tools": [1])"), "tools");
    check_refused(c, chat(R"("tool_choice": "maybe")"), "tool_choice");
    check_refused(c, chat(R"("tool_choice": 5)"), "tool_choice");
    check_accepted(c, chat(R"("logit_bias": {})"));
    check_refused(c, chat(R"("logit_bias": {"5": 10})"), "logit_bias");
    check_refused(c, chat(R"("prompt_logprobs": 1)"), "prompt_logprobs");
    check_refused(c, chat(R"("continue_final_message": true)"), "continue_final_message");
    check_accepted(c, chat(R"("reasoning_effort": "low")"));
    check_accepted(c, chat(R"("reasoning_effort": "none")"));
    check_refused(c, chat(R"("reasoning_effort": "medium")"), "reasoning_effort");
    check_accepted(c, chat(R"("chat_template_kwargs": {"thinking": false, "thinking_effort": "high", "other": 1})"));
    check_refused(c, chat(R"("chat_template_kwargs": {"thinking": "no"})"), "chat_template_kwargs.thinking");
    check_refused(c, chat(R"("chat_template_kwargs": {"thinking_effort": "some"})"),
                  "chat_template_kwargs.thinking_effort");
    check_refused(c, chat(R"("chat_template_kwargs": [])"), "chat_template_kwargs");
    check_refused(c, chat(R"("add_generation_prompt": "x")"), "add_generation_prompt");
    check_refused(c, chat(R"("model": 5)"), "model");
}

TEST_CASE("unknown fields are ignored and null means unset") {
    check_accepted(Api::chat, chat(R"("best_of": 1, "user": "u", "metadata": {"a": [1, {"b": null}]}, "zz": "?")"));
    check_accepted(Api::completions, completion(R"("best_of": 4, "unknown": [[[]]])"));
    const auto g = prepare(Api::chat, chat(R"("temperature": null, "top_p": null, "n": null, "stop": null)"), model());
    CHECK(g.engine_requests[0].sampling.temperature == 1.0f);
    CHECK(g.engine_requests[0].sampling.n == 1);
    CHECK(g.engine_requests[0].sampling.stop.empty());
}

TEST_CASE("chat: messages, valid and invalid") {
    const Api c = Api::chat;
    auto body = [](const std::string& messages) { return R"({"messages": )" + messages + "}"; };
    check_accepted(c, body(R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                              {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}])"));
    check_accepted(c, body(R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": [
                              {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])"));
    check_accepted(c, body(R"([{"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])"));
    check_refused(c, R"({"model": "k3-tiny"})", "messages");
    check_refused(c, body("[]"), "messages");
    check_refused(c, body(R"("hi")"), "messages");
    check_refused(c, body("[1]"), "messages[0]");
    check_refused(c, body(R"([{"content": "x"}])"), "messages[0].role");
    check_refused(c, body(R"([{"role": "robot", "content": "x"}])"), "messages[0].role");
    check_refused(c, body(R"([{"role": 1, "content": "x"}])"), "messages[0].role");
    check_refused(c, body(R"([{"role": "user"}])"), "messages[0].content");
    check_refused(c, body(R"([{"role": "user", "content": 5}])"), "messages[0].content");
    check_refused(c, body(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])"),
                  "messages[0].content[0]");
    check_refused(c, body(R"([{"role": "user", "content": [{"type": "text"}]}])"), "messages[0].content[0].text");
    check_refused(c, body(R"([{"role": "user", "content": [{"type": "bogus"}]}])"), "messages[0].content[0].type");
    check_refused(c, body(R"([{"role": "user", "content": ["text"]}])"), "messages[0].content[0]");
    check_refused(c, body(R"([{"role": "user", "content": "x", "name": 3}])"), "messages[0].name");
    check_refused(c, body(R"([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "c"}]}])"),
                  "messages[1].tool_calls[0]");
    check_refused(c, body(R"([{"role": "tool", "content": "x", "tool_call_id": 7}])"), "messages[0].tool_call_id");
    // A tool result the renderer cannot attribute is refused by the renderer itself.
    check_refused(c, body(R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}])"), "messages");
    const Refusal r = refusal(c, R"({"model": "other", "messages": [{"role": "user", "content": "x"}]})", model());
    CHECK(r.status == 404);
    CHECK(r.param == "model");
    CHECK(r.code == "model_not_found");
}

TEST_CASE("chat prompts are the renderer's segments, encoded segment by segment") {
    const auto& tok = k3_tokenizer();
    const ojson msgs =
        ojson::parse(R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi <|open|>"}])");
    SUBCASE("K3, thinking by default") {
        const auto g = prepare(Api::chat, R"({"messages": [{"role": "developer", "content": "be brief"},
                                                          {"role": "user", "content": "hi <|open|>"}]})",
                               model());
        CHECK(g.engine_requests.at(0).prompt == tok.encode_segments(kiln::model::render_k3_chat(msgs)));
    }
    SUBCASE("K3, thinking off through chat_template_kwargs and reasoning_effort") {
        kiln::model::K3ChatOptions o;
        o.thinking = false;
        const auto want = tok.encode_segments(kiln::model::render_k3_chat(msgs, o));
        for (const char* extra : {R"("chat_template_kwargs": {"thinking": false})", R"("reasoning_effort": "none")",
                                  R"("chat_template_kwargs": {"enable_thinking": false})"}) {
            CAPTURE(extra);
            const auto g = prepare(Api::chat, R"({"messages": )" + msgs.dump() + ", " + extra + "}", model());
            CHECK(g.engine_requests.at(0).prompt == want);
        }
    }
    SUBCASE("K3 thinking effort and response format notes") {
        kiln::model::K3ChatOptions o;
        o.thinking_effort = "low";
        o.response_format = ojson::parse(R"({"type": "json_object"})");
        const auto g = prepare(Api::chat,
                               R"({"messages": )" + msgs.dump() +
                                   R"(, "reasoning_effort": "low", "response_format": {"type": "json_object"}})",
                               model());
        CHECK(g.engine_requests.at(0).prompt == tok.encode_segments(kiln::model::render_k3_chat(msgs, o)));
    }
    SUBCASE("K2 template for K2 vocabularies") {
        const ServedModel k2 = k2_model();
        CHECK(k2.chat_template == ChatTemplate::k2);
        const auto g = prepare(Api::chat, R"({"messages": )" + msgs.dump() + "}", k2);
        CHECK(g.engine_requests.at(0).prompt == k2_tokenizer().encode_segments(kiln::model::render_k2_chat(msgs)));
        const Refusal r = refusal(
            Api::chat, R"({"messages": )" + msgs.dump() + R"(, "response_format": {"type": "json_object"}})", k2);
        CHECK(r.status == 400);
        CHECK(r.param == "response_format");
    }
    CHECK(model().chat_template == ChatTemplate::k3);
}

TEST_CASE("completions: prompts, logprobs and refused fields") {
    const Api c = Api::completions;
    check_accepted(c, completion(""));
    check_accepted(c, completion("", "[1, 2, 3]"));
    check_accepted(c, completion("", "[[1, 2], [3]]"));
    check_accepted(c, completion("", R"(["a", "b"])"));
    check_accepted(c, completion(R"("logprobs": 0)"));
    check_accepted(c, completion(R"("logprobs": 5, "echo": false, "suffix": "")"));
    check_refused(c, R"({"model": "k3-tiny"})", "prompt");
    check_refused(c, completion("", R"("")"), "prompt");
    check_refused(c, completion("", "[]"), "prompt");
    check_refused(c, completion("", "[[]]"), "prompt");
    check_refused(c, completion("", R"([1, "a"])"), "prompt");
    check_refused(c, completion("", "[[-1]]"), "prompt");
    check_refused(c, completion("", "[4096]"), "prompt");
    check_refused(c, completion("", "[true]"), "prompt");
    check_refused(c, completion("", "5"), "prompt");
    check_refused(c, completion("", R"(["a", 5])"), "prompt");
    check_refused(c, completion(R"("logprobs": -1)"), "logprobs");
    check_refused(c, completion(R"("logprobs": 21)"), "logprobs");
    check_refused(c, completion(R"("logprobs": true)"), "logprobs");
    check_refused(c, completion(R"("logprobs": 1.5)"), "logprobs");
    check_refused(c, completion(R"("echo": true)"), "echo");
    check_refused(c, completion(R"("suffix": "end")"), "suffix");
    check_refused(c, completion(R"("response_format": {"type": "json_object"})"), "response_format");
    check_refused(c, completion(R"("temperature": 9)"), "temperature");
    check_refused(c, completion(R"("stream_options": {"include_usage": true})"), "stream_options");

    RequestLimits few;
    few.max_prompts = 2;
    CHECK(refusal(c, completion("", R"(["a", "b", "c"])"), model(), few).param == "prompt");
    CHECK(refusal(c, completion("", R"(["a", "b"])"), model(), few).status == 0);
}

TEST_CASE("completion prompts: text with special tokens recognised, ids as given, batches") {
    const auto& tok = k3_tokenizer();
    const auto g = prepare(Api::completions,
                           completion(R"("n": 2, "logprobs": 2)", R"(["a<|end_of_msg|>b", [5, 6, 7]])"), model());
    REQUIRE(g.engine_requests.size() == 2);
    CHECK(g.engine_requests[0].prompt == tok.encode("a<|end_of_msg|>b", kiln::model::SpecialTokens::control));
    CHECK(g.engine_requests[1].prompt == std::vector<TokenId>{5, 6, 7});
    CHECK(g.engine_requests[0].id == "req1-0");
    CHECK(g.engine_requests[1].id == "req1-1");
    CHECK(g.engine_requests[1].sampling.n == 2);
    CHECK(g.engine_requests[1].sampling.logprobs == 2u);
    CHECK(g.response.prompt_tokens == std::vector<uint64_t>{g.engine_requests[0].prompt.size(), 3});
    CHECK(g.response.id == "cmpl-req1");
    CHECK(g.response.model == "k3-tiny");
    CHECK(g.response.n == 2);
    CHECK(g.response.logprobs);
}

TEST_CASE("sampling fields reach the engine request as given") {
    const auto g = prepare(Api::chat, chat(R"("temperature": 0.5, "top_p": 0.75, "top_k": -1, "min_p": 0.125,
                                   "presence_penalty": 0.5, "frequency_penalty": -0.25, "repetition_penalty": 1.5,
                                   "seed": -12345, "stop": "END", "stop_token_ids": [9, 9, 10], "ignore_eos": true,
                                   "min_tokens": 3, "max_completion_tokens": 7, "max_tokens": 99,
                                   "logprobs": true, "top_logprobs": 4, "skip_special_tokens": false,
                                   "include_stop_str_in_output": true, "n": 2,
                                   "stream": true, "stream_options": {"include_usage": true}, "model": "k3-tiny")"),
                           model());
    const SamplingParams& s = g.engine_requests.at(0).sampling;
    CHECK(s.temperature == 0.5f);
    CHECK(s.top_p == 0.75f);
    CHECK(s.top_k == 0);
    CHECK(s.min_p == 0.125f);
    CHECK(s.presence_penalty == 0.5f);
    CHECK(s.frequency_penalty == -0.25f);
    CHECK(s.repetition_penalty == 1.5f);
    CHECK(s.seed == -12345);
    CHECK(s.stop == std::vector<std::string>{"END"});
    CHECK(s.stop_token_ids == std::vector<TokenId>{9, 10});
    CHECK(s.ignore_eos);
    CHECK(s.min_tokens == 3);
    CHECK(s.max_tokens == 7);  // max_completion_tokens wins over max_tokens
    CHECK(s.logprobs == 4u);
    CHECK_FALSE(s.skip_special_tokens);
    CHECK(s.include_stop_str_in_output);
    CHECK(s.n == 2);
    CHECK(g.request.stream);
    CHECK(g.request.stream_options.include_usage);
    CHECK_FALSE(g.request.stream_options.continuous_usage_stats);
    CHECK(g.response.id == "chatcmpl-req1");
    CHECK(g.response.api == Api::chat);

    const auto seedless = prepare(Api::chat, chat(R"("seed": -1)"), model());
    CHECK_FALSE(seedless.engine_requests[0].sampling.seed.has_value());
    const auto nolp = prepare(Api::chat, chat(R"("logprobs": false, "top_logprobs": 0)"), model());
    CHECK_FALSE(nolp.engine_requests[0].sampling.logprobs.has_value());
    const auto lp0 = prepare(Api::chat, chat(R"("logprobs": true)"), model());
    CHECK(lp0.engine_requests[0].sampling.logprobs == 0u);
}

TEST_CASE("max_tokens is fitted to the context; prompts that leave no room are refused") {
    const ServedModel small = k3_model(32);
    const auto& tok = k3_tokenizer();
    const std::vector<TokenId> ids = tok.encode("once upon a time", kiln::model::SpecialTokens::control);
    REQUIRE(ids.size() < 20);
    const uint32_t room = 32 - uint32_t(ids.size());

    CHECK(prepare(Api::completions, completion(""), small).engine_requests[0].sampling.max_tokens ==
          std::min<uint32_t>(16, room));
    CHECK(
        prepare(Api::completions, completion(R"("max_tokens": 1000)"), small).engine_requests[0].sampling.max_tokens ==
        room);
    CHECK(prepare(Api::completions, completion(R"("max_tokens": 2)"), small).engine_requests[0].sampling.max_tokens ==
          2);
    // Chat defaults to the rest of the context.
    const size_t chat_len = prepare(Api::chat, chat(""), model()).engine_requests[0].prompt.size();
    const ServedModel fits_chat = k3_model(uint32_t(chat_len + 10));
    CHECK(prepare(Api::chat, chat(""), fits_chat).engine_requests[0].sampling.max_tokens == 10);
    CHECK(refusal(Api::chat, chat(""), k3_model(uint32_t(chat_len))).code == "context_length_exceeded");

    std::string long_ids = "[";
    for (int i = 0; i < 32; ++i) long_ids += (i ? ", " : "") + std::to_string(i + 1);
    long_ids += "]";
    Refusal r = refusal(Api::completions, completion("", long_ids), small);
    CHECK(r.status == 400);
    CHECK(r.param == "prompt");
    CHECK(r.code == "context_length_exceeded");
    CHECK(r.message.find("maximum context length is 32 tokens") != std::string::npos);

    RequestLimits limit;
    limit.max_prompt_tokens = 2;
    r = refusal(Api::completions, completion("", "[1, 2, 3]"), small, limit);
    CHECK(r.status == 400);
    CHECK(r.code == "context_length_exceeded");
    CHECK(refusal(Api::completions, completion("", "[1, 2]"), small, limit).status == 0);
    // min_tokens is checked against the fitted max_tokens.
    CHECK(refusal(Api::completions, completion(R"("min_tokens": 31)", "[1, 2]"), small).param == "min_tokens");
}
