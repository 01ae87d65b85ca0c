// Response bodies and SSE streams, compared byte for byte with hand-written expected text: OpenAI's
// framing (role chunk, token deltas, finish chunk, usage only when asked, [DONE]), n > 1, both
// logprobs shapes, continuous usage, errors after the 200, and the models card. Events are written
// out as the engine contract (serving/engine/request.hpp) defines them.
#include "tests/serving/http_test_support.hpp"

#include "serving/http/openai_response.hpp"

using namespace kiln::serving;
using namespace kiln::serving::http;
using namespace kiln::serving::http::test;

namespace {

// The tiny vocabulary's byte tokens have id = byte value.
constexpr TokenId H = 72, i_ = 105, bang = 33, lead_c3 = 195;

ResponseContext context(Api api, uint32_t n = 1, std::vector<uint64_t> prompt_tokens = {9}) {
    ResponseContext c;
    c.api = api;
    c.id = api == Api::chat ? "chatcmpl-1" : "cmpl-1";
    c.created = 1;
    c.model = "k3";
    c.n = n;
    c.prompt_tokens = std::move(prompt_tokens);
    c.tokenizer = &k3_tokenizer();
    return c;
}

GenerationEvent tokens(std::vector<TokenId> ids, std::string text, uint32_t index = 0) {
    GenerationEvent e;
    e.index = index;
    e.tokens = std::move(ids);
    e.text = std::move(text);
    return e;
}

GenerationEvent finish(FinishReason r, std::vector<TokenId> ids = {}, std::string text = {}, uint32_t index = 0) {
    GenerationEvent e = tokens(std::move(ids), std::move(text), index);
    e.finish = r;
    return e;
}

TokenLogprobs lp(TokenId chosen, float logprob, std::vector<TokenLogprob> top = {}) {
    return TokenLogprobs{{chosen, logprob}, std::move(top)};
}

const std::string chat_head = R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"k3",)";
const std::string cmpl_head = R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"k3",)";

}  // namespace

TEST_CASE("a chat stream is framed exactly as OpenAI frames it") {
    ResponseContext ctx = context(Api::chat);
    ctx.stream_options.include_usage = true;
    StreamEncoder enc(ctx);
    std::string wire = enc.begin();
    wire += enc.event(0, tokens({H, i_}, "Hi"));
    wire += enc.event(0, finish(FinishReason::stop));
    wire += enc.end();
    CHECK(wire == chat_head +
                      R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}})"
                      "\n\n"
                      "data: [DONE]\n\n");
    CHECK(enc.usage().completion_tokens == 2);
}

TEST_CASE("chat streams: no usage unless asked, held-back text sends nothing, the last text rides the finish") {
    StreamEncoder enc(context(Api::chat));
    std::string wire = enc.begin();
    wire += enc.event(0, tokens({H}, "H"));
    CHECK(enc.event(0, tokens({lead_c3}, "")).empty());  // half a character: nothing to send yet
    wire += enc.event(0, finish(FinishReason::length, {bang}, "\xc3\xa9!"));
    wire += enc.end();
    CHECK(wire ==
          chat_head +
              R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"
              "\n\n" +
              chat_head +
              R"("choices":[{"index":0,"delta":{"content":"H"},"finish_reason":null}]})"
              "\n\n" +
              chat_head +
              "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xc3\xa9!\"},\"finish_reason\":\"length\"}]}\n\n"
              "data: [DONE]\n\n");
    CHECK(enc.usage().completion_tokens == 3);
    CHECK(enc.usage().prompt_tokens == 9);
}

TEST_CASE("chat streams with n = 2: a role chunk per choice, chunks tagged by index, usage summed") {
    ResponseContext ctx = context(Api::chat, 2);
    ctx.stream_options.include_usage = true;
    StreamEncoder enc(ctx);
    std::string wire = enc.begin();
    wire += enc.event(1, tokens({i_}, "i", 1));
    wire += enc.event(0, tokens({H}, "H"));
    wire += enc.event(1, finish(FinishReason::stop, {}, "", 1));
    wire += enc.event(0, finish(FinishReason::length, {bang}, "!"));
    wire += enc.end();
    CHECK(wire == chat_head +
                      R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":1,"delta":{"content":"i"},"finish_reason":null}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":0,"delta":{"content":"H"},"finish_reason":null}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":1,"delta":{},"finish_reason":"stop"}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]})"
                      "\n\n" +
                      chat_head +
                      R"("choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}})"
                      "\n\n"
                      "data: [DONE]\n\n");
}

TEST_CASE("chat logprobs: content entries with token, logprob, bytes and top_logprobs") {
    ResponseContext ctx = context(Api::chat);
    ctx.logprobs = true;
    StreamEncoder enc(ctx);
    GenerationEvent e = tokens({H, lead_c3}, "H");
    e.logprobs = {lp(H, -0.1f, {{H, -0.1f}, {i_, -2.5f}}),
                  lp(lead_c3, -std::numeric_limits<float>::infinity(), {{H, -0.5f}, {i_, -1.25f}})};
    std::string wire = enc.begin();
    wire += enc.event(0, e);
    GenerationEvent last = finish(FinishReason::stop);
    wire += enc.event(0, last);
    CHECK(
        wire ==
        chat_head +
            R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})"
            "\n\n" +
            chat_head +
            R"("choices":[{"index":0,"delta":{"content":"H"},"logprobs":{"content":[)"
            R"({"token":"H","logprob":-0.1,"bytes":[72],"top_logprobs":[)"
            R"({"token":"H","logprob":-0.1,"bytes":[72]},{"token":"i","logprob":-2.5,"bytes":[105]}]},)"
            "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-9999.0,\"bytes\":[195],\"top_logprobs\":["
            R"({"token":"H","logprob":-0.5,"bytes":[72]},{"token":"i","logprob":-1.25,"bytes":[105]}]}]},)"
            R"("finish_reason":null}]})"
            "\n\n" +
            chat_head +
            R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})"
            "\n\n");

    ResponseAccumulator acc(ctx);
    acc.event(0, e);
    acc.event(0, last);
    const Json body = acc.build();
    const Json& content = body["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 2);
    CHECK(content[0]["token"] == "H");
    CHECK(content[1]["bytes"] == Json::array({195}));
    CHECK(content[1]["top_logprobs"].size() == 2);
}

TEST_CASE("a completions stream has no role chunk and carries text with logprobs null") {
    ResponseContext ctx = context(Api::completions);
    ctx.stream_options.include_usage = true;
    StreamEncoder enc(ctx);
    std::string wire = enc.begin();
    CHECK(wire.empty());
    wire += enc.event(0, tokens({H, i_}, "Hi"));
    wire += enc.event(0, finish(FinishReason::length, {bang}, "!"));
    wire += enc.end();
    CHECK(wire == cmpl_head +
                      R"("choices":[{"index":0,"text":"Hi","logprobs":null,"finish_reason":null}]})"
                      "\n\n" +
                      cmpl_head +
                      R"("choices":[{"index":0,"text":"!","logprobs":null,"finish_reason":"length"}]})"
                      "\n\n" +
                      cmpl_head +
                      R"("choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}})"
                      "\n\n"
                      "data: [DONE]\n\n");
}

TEST_CASE("completions logprobs: text_offset, token_logprobs, tokens and top_logprobs with the chosen token") {
    ResponseContext ctx = context(Api::completions);
    ctx.logprobs = true;
    GenerationEvent a = tokens({H, i_}, "Hi");
    a.logprobs = {lp(H, -0.5f, {{i_, -1.25f}, {H, -0.5f}}), lp(i_, -0.25f, {})};
    GenerationEvent b = finish(FinishReason::stop, {bang}, "!");
    b.logprobs = {lp(bang, -2.0f, {{H, -0.75f}})};

    StreamEncoder enc(ctx);
    const std::string first = enc.event(0, a), second = enc.event(0, b);
    CHECK(first == cmpl_head + R"("choices":[{"index":0,"text":"Hi","logprobs":{"text_offset":[0,1],)"
                               R"("token_logprobs":[-0.5,-0.25],"tokens":["H","i"],)"
                               R"("top_logprobs":[{"i":-1.25,"H":-0.5},{"i":-0.25}]},"finish_reason":null}]})"
                               "\n\n");
    CHECK(second == cmpl_head + R"("choices":[{"index":0,"text":"!","logprobs":{"text_offset":[2],)"
                                R"("token_logprobs":[-2.0],"tokens":["!"],"top_logprobs":[{"H":-0.75,"!":-2.0}]},)"
                                R"("finish_reason":"stop"}]})"
                                "\n\n");

    ResponseAccumulator acc(ctx);
    acc.event(0, a);
    CHECK_FALSE(acc.finished());
    acc.event(0, b);
    CHECK(acc.finished());
    CHECK(dump_json(acc.build()) ==
          R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"k3","choices":[{"index":0,"text":"Hi!",)"
          R"("logprobs":{"text_offset":[0,1,2],"token_logprobs":[-0.5,-0.25,-2.0],"tokens":["H","i","!"],)"
          R"("top_logprobs":[{"i":-1.25,"H":-0.5},{"i":-0.25},{"H":-0.75,"!":-2.0}]},"finish_reason":"stop"}],)"
          R"("usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}})");
}

TEST_CASE("whole chat responses: message, logprobs null, finish reasons, usage over n and prompts") {
    ResponseContext ctx = context(Api::chat, 2);
    ctx.prompt_tokens_details = true;
    ResponseAccumulator acc(ctx);
    acc.event(0, tokens({H}, "H"));
    acc.event(1, tokens({i_, i_}, "ii", 1));
    acc.event(1, finish(FinishReason::stop, {}, "", 1));
    CHECK_FALSE(acc.finished());
    GenerationEvent f = finish(FinishReason::length, {bang}, "!");
    f.cached_prompt_tokens = 4;
    acc.event(0, f);
    CHECK(acc.finished());
    CHECK(dump_json(acc.build()) ==
          R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"k3","choices":[)"
          R"({"index":0,"message":{"role":"assistant","content":"H!"},"logprobs":null,"finish_reason":"length"},)"
          R"({"index":1,"message":{"role":"assistant","content":"ii"},"logprobs":null,"finish_reason":"stop"}],)"
          R"("usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,)"
          R"("prompt_tokens_details":{"cached_tokens":4}}})");

    // Two prompts of a completions batch: prompt tokens add up, choice p·n + i.
    ResponseAccumulator batch(context(Api::completions, 1, {3, 5}));
    batch.event(1, finish(FinishReason::stop, {H}, "H"));
    batch.event(0, finish(FinishReason::stop, {i_}, "i"));
    const Json b = batch.build();
    CHECK(b["choices"][0]["text"] == "i");
    CHECK(b["choices"][1]["text"] == "H");
    CHECK(b["usage"]["prompt_tokens"] == 8);
    CHECK(b["usage"]["completion_tokens"] == 2);
}

TEST_CASE("continuous usage stats put the running totals on every chunk") {
    ResponseContext ctx = context(Api::completions);
    ctx.stream_options.continuous_usage_stats = true;
    StreamEncoder enc(ctx);
    CHECK(enc.event(0, tokens({H}, "H")) ==
          cmpl_head + R"("choices":[{"index":0,"text":"H","logprobs":null,"finish_reason":null}],)"
                      R"("usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}})"
                      "\n\n");
    CHECK(enc.end() == "data: [DONE]\n\n");
}

TEST_CASE("errors after the 200 are an error event, then [DONE]") {
    CHECK(StreamEncoder::error(ApiError(503, "the server is shutting down", {}, "shutting_down")) ==
          R"(data: {"error":{"message":"the server is shutting down","type":"server_error","param":null,)"
          R"("code":"shutting_down"}})"
          "\n\ndata: [DONE]\n\n");
}

TEST_CASE("ids and the models card") {
    const std::string a = random_request_id(), b = random_request_id();
    CHECK(a.size() == 32);
    CHECK(a != b);
    CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(response_id(Api::chat, a) == "chatcmpl-" + a);
    CHECK(response_id(Api::completions, a) == "cmpl-" + a);
    CHECK(dump_json(models_json({"k3-tiny"}, "presets/k3-tiny", 1700000000, 4096)) ==
          R"({"object":"list","data":[{"id":"k3-tiny","object":"model","created":1700000000,"owned_by":"kiln",)"
          R"("root":"presets/k3-tiny","parent":null,"max_model_len":4096}]})");
}
