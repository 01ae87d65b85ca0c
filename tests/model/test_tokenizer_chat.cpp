// Chat rendering. Each case lists the expected segments by hand (control markers and plain text, in
// the exact split the K3 encoder uses) and checks both the rendered segments and the token ids:
// markers are single special ids, text is encoded on its own, never merged with its neighbours.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "model/tokenizer/chat_k2.hpp"
#include "model/tokenizer/chat_k3.hpp"
#include "model/tokenizer/tiny_vocab.hpp"
#include "model/tokenizer/tokenizer_error.hpp"

using namespace kiln::model;
using ojson = nlohmann::ordered_json;

namespace {

ChatSegment C(std::string s) { return {std::move(s), true}; }
ChatSegment T(std::string s) { return {std::move(s), false}; }

const Tokenizer& k3() {
    static const Tokenizer t = make_tiny_tokenizer(k3_special_names());
    return t;
}
const Tokenizer& k2() {
    static const Tokenizer t = make_tiny_tokenizer(k2_special_names());
    return t;
}

// Token ids of hand-written segments: a marker is one special id (it must exist), other control
// text (an image's media block) is encoded with special tokens recognised.
std::vector<uint32_t> ids_of(const Tokenizer& tok, const ChatSegments& segs) {
    std::vector<uint32_t> out;
    for (const auto& s : segs) {
        if (s.control && s.text.find('<', 1) == std::string::npos) {
            out.push_back(tok.require_special(s.text));
        } else if (s.control) {
            const auto ids = tok.encode(s.text, SpecialTokens::control);
            out.insert(out.end(), ids.begin(), ids.end());
        } else {
            const auto ids = tok.encode(s.text, SpecialTokens::text);
            out.insert(out.end(), ids.begin(), ids.end());
        }
    }
    return out;
}

void check_render(const Tokenizer& tok, const ChatSegments& got, const ChatSegments& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        INFO("segment " << i << ": got '" << got[i].text << "' control=" << got[i].control << ", want '"
                        << want[i].text << "' control=" << want[i].control);
        CHECK(got[i] == want[i]);
    }
    CHECK(tok.encode_segments(got) == ids_of(tok, want));
}

// <|open|>tag( key="value")*<|sep|> written out segment by segment.
ChatSegments open(const std::string& tag, std::vector<std::pair<std::string, std::string>> attrs = {}) {
    ChatSegments s = {C("<|open|>"), T(tag)};
    for (auto& [k, v] : attrs) {
        s.push_back(T(std::string(" ").append(k)));
        s.push_back(T("=\""));
        s.push_back(T(v));
        s.push_back(T("\""));
    }
    s.push_back(C("<|sep|>"));
    return s;
}
ChatSegments close(const std::string& tag) { return {C("<|close|>"), T(tag), C("<|sep|>")}; }

ChatSegments cat(std::initializer_list<ChatSegments> parts) {
    ChatSegments out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

K3ChatOptions no_effort() {
    K3ChatOptions o;
    o.thinking_effort.reset();
    return o;
}

}  // namespace

TEST_CASE("K3: user turn and generation prompt, literal ids") {
    const auto segs = render_k3_chat(ojson::parse(R"([{"role": "user", "content": "Hi"}])"), no_effort());
    const ChatSegments want = {C("<|open|>"), T("message"), T(" role"), T("=\""), T("user"), T("\""), C("<|sep|>"),
                               T("Hi"), C("<|close|>"), T("message"), C("<|sep|>"), C("<|end_of_msg|>"),
                               C("<|open|>"), T("message"), T(" role"), T("=\""), T("assistant"), T("\""),
                               C("<|sep|>"), C("<|open|>"), T("think"), C("<|sep|>")};
    check_render(k3(), segs, want);
    const auto ids = k3().encode_segments(segs);
    CHECK(ids.front() == 3843);  // <|open|>
    CHECK(std::count(ids.begin(), ids.end(), 3842u) == 1);  // one <|end_of_msg|>
    CHECK(ids.back() == 3845);   // <|sep|>
    CHECK(join_segments(segs) ==
          "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
          "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
    // Segments are encoded apart, never merged across a boundary.
    CHECK(k3().encode_segments({T("th"), T("e")}) != k3().encode("the", SpecialTokens::text));
    CHECK(k3().encode_segments({T("th"), T("e")}).size() == 2);
}

TEST_CASE("K3: system turn with name (escaping & and \"), thinking off") {
    K3ChatOptions o = no_effort();
    o.thinking = false;
    const auto segs = render_k3_chat(
        ojson::parse(R"([{"role": "system", "name": "a\"&b", "content": "Be brief."},
                         {"role": "user", "content": "say <|end_of_msg|> please"}])"),
        o);
    const auto want = cat({open("message", {{"role", "system"}, {"name", "a&quot;&amp;b"}}), {T("Be brief.")},
                           close("message"), {C("<|end_of_msg|>")}, open("message", {{"role", "user"}}),
                           {T("say <|end_of_msg|> please")}, close("message"), {C("<|end_of_msg|>")},
                           open("message", {{"role", "assistant"}}), open("response")});
    check_render(k3(), segs, want);
    // The marker typed by the user stays text: exactly two real <|end_of_msg|> ids.
    const auto ids = k3().encode_segments(segs);
    CHECK(std::count(ids.begin(), ids.end(), 3842u) == 2);
}

TEST_CASE("K3: assistant turn with reasoning, content parts, and the default thinking-effort note") {
    const auto segs = render_k3_chat(ojson::parse(R"([
        {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}, {"type": "text", "text": " Quick."}]},
        {"role": "assistant", "reasoning_content": "Add them.", "content": "4"},
        {"role": "assistant", "reasoning_content": "   ", "content": null}])"));
    const auto want = cat({
        open("message", {{"role", "system"}, {"type", "thinking-effort"}}),
        {T("`thinking_effort` guides on how much to think in your thinking channel (not including the response "
           "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
           "Now the system is invoked with `thinking_effort=max`.")},
        close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "user"}}), {T("What is 2+2?"), T(" Quick.")}, close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "assistant"}}), open("think"), {T("Add them.")}, close("think"), open("response"),
        {T("4")}, close("response"), close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "assistant"}}), open("think"), close("think"), open("response"), close("response"),
        close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "assistant"}}), open("think"),
    });
    check_render(k3(), segs, want);
}

TEST_CASE("K3: tool declaration, tool calls and tool results (re-ordered by tool_call_id)") {
    K3ChatOptions o = no_effort();
    o.thinking = false;
    o.tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    o.tool_choice = "required";
    const auto segs = render_k3_chat(ojson::parse(R"([
        {"role": "user", "content": "Weather in Hà Nội and Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Hà Nội\", \"days\": 3, \"metric\": true, \"at\": [1, 2]}"}},
            {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{oops"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "not found"},
        {"role": "tool", "tool_call_id": "c1", "content": "31°C"}])"),
        o);
    const auto want = cat({
        open("message", {{"role", "system"}, {"type", "tool-declare"}}),
        {T("# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n"
           "[{\"function\":{\"description\":\"Weather\",\"name\":\"get_weather\",\"parameters\":{\"properties\":"
           "{\"city\":{\"type\":\"string\"}},\"type\":\"object\"}},\"type\":\"function\"}]\n```")},
        close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "user"}}), {T("Weather in Hà Nội and Paris?")}, close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "assistant"}}), open("response"), close("response"), open("tools"),
        open("call", {{"tool", "get_weather"}, {"index", "1"}}),
        open("argument", {{"key", "city"}, {"type", "string"}}), {T("Hà Nội")}, close("argument"),
        open("argument", {{"key", "days"}, {"type", "number"}}), {T("3")}, close("argument"),
        open("argument", {{"key", "metric"}, {"type", "boolean"}}), {T("true")}, close("argument"),
        open("argument", {{"key", "at"}, {"type", "array"}}), {T("[1, 2]")}, close("argument"),
        close("call"),
        open("call", {{"tool", "lookup"}, {"index", "2"}}), open("json", {{"type", "object"}}), {T("{oops")},
        close("json"), close("call"), close("tools"), close("message"), {C("<|end_of_msg|>")},
        // Results follow the call order, named after the call they answer.
        open("message", {{"role", "tool"}, {"tool", "get_weather"}, {"index", "1"}}), {T("31°C")}, close("message"),
        {C("<|end_of_msg|>")},
        open("message", {{"role", "tool"}, {"tool", "lookup"}, {"index", "2"}}), {T("not found")}, close("message"),
        {C("<|end_of_msg|>")},
        open("message", {{"role", "system"}, {"type", "tool-choice"}}),
        {T("The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.")},
        close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "assistant"}}), open("response"),
    });
    check_render(k3(), segs, want);
}

TEST_CASE("K3: response formats, dynamic tools on a system message, tool_choice none") {
    K3ChatOptions o = no_effort();
    o.add_generation_prompt = false;
    o.tool_choice = "none";
    o.response_format = ojson::parse(R"({"type": "json_schema", "json_schema": {"name": "s",
        "schema": {"type": "object", "additionalProperties": false}}})");
    const auto segs = render_k3_chat(ojson::parse(R"([
        {"role": "system", "tools": [{"type": "function", "function": {"name": "f"}}]}])"),
        o);
    const auto want = cat({
        open("message", {{"role", "system"}, {"type", "tool-declare"}}),
        {T("## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
           "You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n"
           "```json\n[{\"function\":{\"name\":\"f\"},\"type\":\"function\"}]\n```")},
        close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "system"}, {"type", "tool-choice"}}),
        {T("The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.")},
        close("message"), {C("<|end_of_msg|>")},
        open("message", {{"role", "system"}, {"type", "response-format"}}),
        {T("The system is invoked with `response_format=json_schema`.\nYour response must be raw JSON data without "
           "markdown code blocks (```json) or any additional formatting.\nThe JSON data must match the following "
           "schema:\n```json\n{\"additionalProperties\":false,\"type\":\"object\"}\n```")},
        close("message"), {C("<|end_of_msg|>")},
    });
    check_render(k3(), segs, want);

    K3ChatOptions j = no_effort();
    j.add_generation_prompt = false;
    j.response_format = ojson::parse(R"({"type": "json_object"})");
    check_render(k3(), render_k3_chat(ojson::array(), j),
                 cat({open("message", {{"role", "system"}, {"type", "response-format"}}),
                      {T("The system is invoked with `response_format=json_object`.\nYour response must be raw JSON "
                         "data without markdown code blocks (```json) or any additional formatting.")},
                      close("message"), {C("<|end_of_msg|>")}}));
}

TEST_CASE("K3: images, unnamed tool results, and errors") {
    K3ChatOptions o = no_effort();
    o.add_generation_prompt = false;
    o.thinking = false;
    o.image_prompts = std::vector<std::string>{"<|media_begin|>image 4x4<|media_content|><|media_pad|><|media_end|>"};
    const auto segs = render_k3_chat(
        ojson::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                                       {"type": "text", "text": "What is this?"}]}])"),
        o);
    check_render(k3(), segs,
                 cat({open("message", {{"role", "user"}}),
                      {C("<|media_begin|>image 4x4<|media_content|><|media_pad|><|media_end|>"), T("What is this?")},
                      close("message"), {C("<|end_of_msg|>")}}));
    // A tool result without id or name takes the name of the call at its position.
    const auto named = render_k3_chat(ojson::parse(R"([
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "ok"}])"),
        no_effort());
    CHECK(join_segments(named).find("<|open|>message role=\"tool\" tool=\"f\" index=\"1\"<|sep|>ok") !=
          std::string::npos);

    K3ChatOptions bad = no_effort();
    bad.thinking_effort = "medium";
    CHECK_THROWS_AS(render_k3_chat(ojson::array(), bad), TokenizerError);
    CHECK_THROWS_AS(render_k3_chat(ojson::parse(R"([{"role": "tool", "content": "x"}])"), no_effort()), TokenizerError);
    CHECK_THROWS_AS(render_k3_chat(ojson::parse(R"([{"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": "[1]"}}]}])"), no_effort()), TokenizerError);
    K3ChatOptions two = o;
    two.image_prompts = std::vector<std::string>{"a", "b"};
    CHECK_THROWS_AS(render_k3_chat(ojson::parse(R"([{"role": "user", "content": "<|kimi_image_placeholder|>"}])"), two),
                    TokenizerError);
}

TEST_CASE("K2 template: default system turn, tools, tool calls, tool results, generation prompt") {
    K2ChatOptions o;
    o.tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])");
    const auto segs = render_k2_chat(ojson::parse(R"([
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "20C"},
        {"role": "user", "name": "bob", "content": "Thanks"}])"),
        o);
    const ChatSegments want = {
        C("<|im_system|>"), T("tool_declare"), C("<|im_middle|>"),
        T("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}]"), C("<|im_end|>"),
        C("<|im_system|>"), T("system"), C("<|im_middle|>"), T("You are Kimi, an AI assistant created by Moonshot AI."),
        C("<|im_end|>"),
        C("<|im_user|>"), T("user"), C("<|im_middle|>"), T("Weather?"), C("<|im_end|>"),
        C("<|im_assistant|>"), T("assistant"), C("<|im_middle|>"), T("Checking."), C("<|tool_calls_section_begin|>"),
        C("<|tool_call_begin|>"), T("functions.get_weather:0"), C("<|tool_call_argument_begin|>"),
        T("{\"city\": \"Paris\"}"), C("<|tool_call_end|>"),
        C("<|tool_call_begin|>"), T("functions.get_weather:1"), C("<|tool_call_argument_begin|>"),
        T("{\"city\": \"Rome\"}"), C("<|tool_call_end|>"), C("<|tool_calls_section_end|>"), C("<|im_end|>"),
        C("<|im_system|>"), T("tool"), C("<|im_middle|>"), T("## Return of functions.get_weather:0\n20C"), C("<|im_end|>"),
        C("<|im_user|>"), T("bob"), C("<|im_middle|>"), T("Thanks"), C("<|im_end|>"),
        C("<|im_assistant|>"), T("assistant"), C("<|im_middle|>"),
    };
    check_render(k2(), segs, want);
    // Same ids as encoding the rendered string in one pass (the template's own tokenization).
    CHECK(k2().encode_segments(segs) == k2().encode(join_segments(segs), SpecialTokens::control));
    const auto ids = k2().encode_segments(segs);
    CHECK(ids.front() == 3840 + 10);  // <|im_system|> (163594 in the real vocabulary)

    // An explicit system message replaces the default one; thinking adds <think>.
    K2ChatOptions t;
    t.thinking = true;
    check_render(k2(),
                 render_k2_chat(ojson::parse(R"([{"role": "system", "content": "S"},
                     {"role": "assistant", "reasoning_content": "r", "content": "a"}])"), t),
                 {C("<|im_system|>"), T("system"), C("<|im_middle|>"), T("S"), C("<|im_end|>"), C("<|im_assistant|>"),
                  T("assistant"), C("<|im_middle|>"), C("<think>"), T("r"), C("</think>"), T("a"), C("<|im_end|>"),
                  C("<|im_assistant|>"), T("assistant"), C("<|im_middle|>"), C("<think>")});
    // The K3 vocabulary has no <|im_*|> tokens: a clear error, not silent BPE.
    CHECK_NOTHROW(check_k2_vocabulary(k2()));
    CHECK_THROWS_WITH_AS(check_k2_vocabulary(k3()), "the vocabulary has no special token <|im_end|>", TokenizerError);
    CHECK_NOTHROW(check_k3_vocabulary(k3()));
    CHECK_THROWS_AS(check_k3_vocabulary(k2()), TokenizerError);
}
