#include "model/tokenizer/chat_k2.hpp"

#include <fmt/format.h>

#include "model/tokenizer/python_json.hpp"
#include "model/tokenizer/tokenizer_error.hpp"

namespace kiln::model {

namespace {

using ojson = nlohmann::ordered_json;

const ojson& get(const ojson& obj, const char* key) {
    static const ojson null_value;
    if (!obj.is_object()) return null_value;
    const auto it = obj.find(key);
    return it == obj.end() ? null_value : *it;
}

class Builder {
public:
    void control(const std::string& t) { out_.push_back({t, true}); }
    // Adjacent text joins one segment: the template renders it as one run of text.
    void text(const std::string& t) {
        if (t.empty()) return;
        if (!out_.empty() && !out_.back().control) {
            out_.back().text += t;
        } else {
            out_.push_back({t, false});
        }
    }
    void content(const ojson& c) {
        if (c.is_null()) return;
        if (c.is_string()) {
            text(c.get<std::string>());
            return;
        }
        if (!c.is_array()) throw TokenizerError("message content must be a string, a list of parts or null");
        for (const auto& part : c) {
            const ojson& type = get(part, "type");
            if (type == "image" || type == "image_url" || part.contains("image") || part.contains("image_url")) {
                control("<|media_begin|>");
                text("image");
                control("<|media_content|>");
                control("<|media_pad|>");
                control("<|media_end|>");
            } else {
                const ojson& t = get(part, "text");
                if (!t.is_string()) throw TokenizerError("a text content part has no string \"text\"");
                text(t.get<std::string>());
            }
        }
    }
    ChatSegments take() { return std::move(out_); }

private:
    ChatSegments out_;
};

}  // namespace

ChatSegments render_k2_chat(const nlohmann::ordered_json& messages, const K2ChatOptions& o) {
    if (!messages.is_array()) throw TokenizerError("messages must be a list");
    Builder b;
    if (python_truthy(o.tools)) {
        b.control("<|im_system|>");
        b.text("tool_declare");
        b.control("<|im_middle|>");
        b.text(python_json_dumps(o.tools, true));
        b.control("<|im_end|>");
    }
    for (size_t i = 0; i < messages.size(); ++i) {
        const ojson& m = messages[i];
        const ojson& role_v = get(m, "role");
        if (!role_v.is_string()) throw TokenizerError("a message has no \"role\"");
        const std::string role = role_v.get<std::string>();
        if (i == 0 && role != "system") {
            b.control("<|im_system|>");
            b.text("system");
            b.control("<|im_middle|>");
            b.text(k2_default_system_prompt);
            b.control("<|im_end|>");
        }
        const ojson& name = get(m, "name");
        const std::string role_name = python_truthy(name) ? python_str(name) : role;
        b.control(role == "user" ? "<|im_user|>" : role == "assistant" ? "<|im_assistant|>" : "<|im_system|>");
        b.text(role_name);
        b.control("<|im_middle|>");

        if (role == "assistant" && o.thinking) {
            const ojson& rc = get(m, "reasoning_content");
            if (python_truthy(rc)) {
                b.control("<think>");
                b.text(python_str(rc));
                b.control("</think>");
            }
        }
        const ojson& calls = get(m, "tool_calls");
        if (role == "assistant" && python_truthy(calls)) {
            if (python_truthy(get(m, "content"))) b.content(get(m, "content"));
            b.control("<|tool_calls_section_begin|>");
            size_t index = 0;
            for (const auto& call : calls) {
                const ojson& fn = get(call, "function");
                b.control("<|tool_call_begin|>");
                const ojson& id = get(call, "id");
                b.text(python_truthy(id) ? python_str(id)
                                         : fmt::format("functions.{}:{}", python_str(get(fn, "name")), index));
                b.control("<|tool_call_argument_begin|>");
                const ojson& args = get(fn, "arguments");
                b.text(args.is_string() ? args.get<std::string>() : python_json_dumps(args, false));
                b.control("<|tool_call_end|>");
                ++index;
            }
            b.control("<|tool_calls_section_end|>");
        } else if (role == "tool") {
            b.text("## Return of " + python_str(get(m, "tool_call_id")) + "\n");
            b.content(get(m, "content"));
        } else {
            b.content(get(m, "content"));
        }
        b.control("<|im_end|>");
    }
    if (o.add_generation_prompt) {
        b.control("<|im_assistant|>");
        b.text("assistant");
        b.control("<|im_middle|>");
        if (o.thinking) b.control("<think>");
    }
    return b.take();
}

void check_k2_vocabulary(const Tokenizer& tok) {
    for (const char* m : {"<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                          "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                          "<|tool_call_argument_begin|>", "<|tool_call_end|>"}) {
        tok.require_special(m);
    }
}

}  // namespace kiln::model
