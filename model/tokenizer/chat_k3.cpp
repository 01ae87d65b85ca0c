#include "model/tokenizer/chat_k3.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "model/tokenizer/python_json.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "model/tokenizer/utf8.hpp"

namespace kiln::model {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* open_token = "<|open|>";
constexpr const char* close_token = "<|close|>";
constexpr const char* sep_token = "<|sep|>";
constexpr const char* end_of_msg_token = "<|end_of_msg|>";

const ojson& get(const ojson& obj, const char* key) {
    static const ojson null_value;
    if (!obj.is_object()) return null_value;
    const auto it = obj.find(key);
    return it == obj.end() ? null_value : *it;
}

class Builder {
public:
    explicit Builder(const std::optional<std::vector<std::string>>& image_prompts) : images_(image_prompts) {}

    void segment(std::string text, bool control) {
        if (!text.empty()) out_.push_back({std::move(text), control});
    }
    void control(std::string text) { segment(std::move(text), true); }
    void text(std::string text) { segment(std::move(text), false); }

    // User-provided text: each image placeholder becomes the next image prompt (when given).
    void append_text(const std::string& t) {
        if (t.empty()) return;
        if (!images_ || t.find(k3_image_placeholder) == std::string::npos) {
            text(t);
            return;
        }
        const std::string_view ph = k3_image_placeholder;
        size_t pos = 0;
        for (;;) {
            const size_t at = t.find(ph, pos);
            text(t.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
            if (at == std::string::npos) break;
            control(next_image());
            pos = at + ph.size();
        }
    }

    std::string next_image() {
        if (!images_) return k3_image_placeholder;
        if (image_index_ >= images_->size()) throw TokenizerError("more image placeholders than image prompts");
        return (*images_)[image_index_++];
    }

    void check_images_consumed() const {
        if (images_ && image_index_ != images_->size()) {
            throw TokenizerError(fmt::format("image prompt count {} != consumed placeholder count {}", images_->size(),
                                             image_index_));
        }
    }

    static std::string escape_attr(const std::string& v) {
        std::string out;
        for (char c : v) {
            if (c == '&') {
                out += "&amp;";
            } else if (c == '"') {
                out += "&quot;";
            } else {
                out += c;
            }
        }
        return out;
    }

    void open(const std::string& tag, const std::vector<std::pair<std::string, std::string>>& attrs = {}) {
        control(open_token);
        text(tag);
        for (const auto& [k, v] : attrs) {
            text(" " + k);
            text("=\"");
            text(escape_attr(v));
            text("\"");
        }
        control(sep_token);
    }
    void close(const std::string& tag) {
        control(close_token);
        text(tag);
        control(sep_token);
    }
    void end_of_msg() { control(end_of_msg_token); }

    void internal_system_message(const std::string& type, const std::string& body) {
        open("message", {{"role", "system"}, {"type", type}});
        text(std::string(utf8::python_strip(body)));
        close("message");
        end_of_msg();
    }

    void content(const ojson& c) {
        if (c.is_null()) return;
        if (c.is_string()) {
            append_text(c.get<std::string>());
            return;
        }
        if (!c.is_array()) throw TokenizerError("message content must be a string, a list of parts or null");
        for (const auto& part : c) {
            const ojson& type = get(part, "type");
            if (!type.is_string()) throw TokenizerError("a content part has no \"type\"");
            const auto& t = type.get_ref<const std::string&>();
            if (t == "image" || t == "image_url") {
                control(next_image());
            } else {
                const ojson& txt = get(part, "text");
                if (!txt.is_string()) throw TokenizerError(fmt::format("a \"{}\" content part has no string \"text\"", t));
                append_text(txt.get<std::string>());
            }
        }
    }

    ChatSegments take() { return std::move(out_); }

private:
    ChatSegments out_;
    const std::optional<std::vector<std::string>>& images_;
    size_t image_index_ = 0;
};

void tool_declare(Builder& b, const ojson& tools, bool dynamic) {
    const std::string schemas = python_json_dumps(tools, true);
    std::string body;
    if (dynamic) {
        body = "## New Tools Available\n"
               "The system dynamically extends the toolset via lazy-loading.\n"
               "You have access to all existing and extended tools.\n"
               "Here are the specs for the extended tools.\n\n"
               "```json\n" + schemas + "\n```";
    } else {
        body = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" + schemas + "\n```";
    }
    b.internal_system_message("tool-declare", body);
}

std::string xtml_type(const ojson& v) {
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_object()) return "object";
    return "array";
}

// A tool call's arguments as an object, or (object, raw text) when the text is not JSON.
std::pair<ojson, std::optional<std::string>> normalize_arguments(const ojson& args) {
    if (args.is_null()) return {ojson::object(), std::nullopt};
    if (args.is_object()) return {args, std::nullopt};
    if (args.is_string()) {
        const auto& s = args.get_ref<const std::string&>();
        if (utf8::python_strip(s).empty()) return {ojson::object(), std::nullopt};
        ojson parsed = ojson::parse(s, nullptr, false);
        if (parsed.is_discarded()) return {ojson::object(), s};
        if (!parsed.is_object()) throw TokenizerError("Kimi K3 tool call arguments must be a JSON object");
        return {parsed, std::nullopt};
    }
    throw TokenizerError("Kimi K3 tool call arguments must be an object or a JSON object string");
}

std::optional<std::string> id_key(const ojson& id) {
    if (id.is_null()) return std::nullopt;
    return python_str(id);
}

// normalize_xtml_tool_result_messages: each run of tool messages is sorted into the order of the
// preceding assistant's tool_calls and named after the call it answers; a run with any unmatched
// result is left as it is.
std::vector<ojson> order_tool_results(const ojson& messages) {
    std::vector<ojson> out;
    struct CallInfo {
        size_t position;
        ojson name;
    };
    std::vector<std::pair<std::string, CallInfo>> index;
    auto lookup = [&](const std::string& k) -> const CallInfo* {
        for (const auto& [key, info] : index)
            if (key == k) return &info;
        return nullptr;
    };
    size_t i = 0;
    const size_t n = messages.size();
    while (i < n) {
        const ojson& m = messages[i];
        const ojson& role = get(m, "role");
        if (role == "assistant") {
            index.clear();
            const ojson& calls = get(m, "tool_calls");
            if (python_truthy(calls) && calls.is_array()) {
                size_t position = 0;
                for (const auto& call : calls) {
                    ++position;
                    if (!call.is_object()) continue;
                    const auto key = id_key(get(call, "id"));
                    if (!key || lookup(*key)) continue;
                    const ojson& fn = get(call, "function");
                    index.push_back({*key, {position, fn.is_object() ? get(fn, "name") : get(call, "name")}});
                }
            }
            out.push_back(m);
            ++i;
            continue;
        }
        if (role != "tool") {
            out.push_back(m);
            ++i;
            continue;
        }
        struct Item {
            size_t position, offset;
            const ojson* msg;
            const CallInfo* call;
        };
        std::vector<Item> run;
        bool unresolved = false;
        for (size_t offset = 0; i < n && get(messages[i], "role") == "tool"; ++i, ++offset) {
            const ojson& t = messages[i];
            const ojson& cid = t.contains("tool_call_id") ? t["tool_call_id"] : get(t, "id");
            const auto key = id_key(cid);
            const CallInfo* call = key ? lookup(*key) : nullptr;
            if (!call) unresolved = true;
            run.push_back({call ? call->position : 0, offset, &t, call});
        }
        if (!unresolved) {
            std::stable_sort(run.begin(), run.end(), [](const Item& a, const Item& b) { return a.position < b.position; });
        }
        for (const auto& item : run) {
            if (unresolved || item.call->name.is_null()) {
                out.push_back(*item.msg);
                continue;
            }
            ojson resolved = *item.msg;
            resolved["tool"] = item.call->name;
            if (resolved.contains("name")) resolved["name"] = item.call->name;
            out.push_back(std::move(resolved));
        }
    }
    return out;
}

void render_assistant(Builder& b, const ojson& m, bool thinking) {
    if (thinking) {
        const ojson& rc = get(m, "reasoning_content");
        const ojson& reasoning = python_truthy(rc) ? rc : get(m, "reasoning");
        b.open("think");
        if (!reasoning.is_null()) {
            const std::string r = python_str(reasoning);
            if (!utf8::python_strip(r).empty()) b.append_text(r);
        }
        b.close("think");
    }
    b.open("response");
    b.content(get(m, "content"));
    b.close("response");

    const ojson& calls = get(m, "tool_calls");
    if (!python_truthy(calls)) return;
    if (!calls.is_array()) throw TokenizerError("tool_calls must be a list");
    b.open("tools");
    size_t index = 0;
    for (const auto& call : calls) {
        ++index;
        if (!call.is_object()) throw TokenizerError("Kimi K3 tool calls must be objects");
        const ojson& fn = call.contains("function") ? call["function"] : call;
        const ojson& name = get(fn, "name");
        if (!name.is_string() || name.get_ref<const std::string&>().empty()) {
            throw TokenizerError("Kimi K3 tool calls require a non-empty function name");
        }
        b.open("call", {{"tool", name.get<std::string>()}, {"index", std::to_string(index)}});
        auto [args, raw] = normalize_arguments(get(fn, "arguments"));
        if (raw) {
            b.open("json", {{"type", "object"}});
            b.append_text(*raw);
            b.close("json");
        } else {
            for (const auto& [key, value] : args.items()) {
                b.open("argument", {{"key", key}, {"type", xtml_type(value)}});
                b.append_text(value.is_string() ? value.get<std::string>() : python_json_dumps(value, false));
                b.close("argument");
            }
        }
        b.close("call");
    }
    b.close("tools");
}

ojson response_schema(const ojson& rf) {
    const ojson& js = get(rf, "json_schema");
    if (js.is_null()) return ojson();
    if (js.is_object()) {
        if (js.contains("schema")) return js["schema"];
        if (js.contains("json_schema")) return js["json_schema"];
    }
    return js;
}

}  // namespace

ChatSegments render_k3_chat(const nlohmann::ordered_json& messages, const K3ChatOptions& o) {
    if (!messages.is_array()) throw TokenizerError("messages must be a list");
    const std::vector<ojson> msgs = order_tool_results(messages);
    Builder b(o.image_prompts);

    if (python_truthy(o.tools)) tool_declare(b, deep_sort(o.tools), false);

    if (o.thinking && o.thinking_effort) {
        const std::string& e = *o.thinking_effort;
        if (e != "low" && e != "high" && e != "max") {
            throw TokenizerError(fmt::format("unsupported thinking_effort '{}'; supported values are high, low, max", e));
        }
        b.internal_system_message(
            "thinking-effort",
            "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
            "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
            "Now the system is invoked with `thinking_effort=" + e + "`.");
    }

    const ojson* last_calls = nullptr;
    size_t tool_index = 0;
    for (const ojson& m : msgs) {
        if (!m.is_object()) continue;
        const ojson& role_v = get(m, "role");
        if (!role_v.is_string()) throw TokenizerError("a message has no \"role\"");
        const std::string role = role_v.get<std::string>();
        auto name_attrs = [&](const char* r) {
            std::vector<std::pair<std::string, std::string>> attrs{{"role", r}};
            const ojson& name = get(m, "name");
            if (python_truthy(name)) attrs.push_back({"name", python_str(name)});
            return attrs;
        };
        if (role == "user" || (role == "system" && !python_truthy(get(m, "tools")))) {
            b.open("message", name_attrs(role.c_str()));
            b.content(get(m, "content"));
            b.close("message");
            b.end_of_msg();
        } else if (role == "system") {
            tool_declare(b, deep_sort(m["tools"]), true);
        } else if (role == "tool") {
            ++tool_index;
            ojson tool_name = m.contains("tool") ? m["tool"] : get(m, "name");
            if (tool_name.is_null() && last_calls && last_calls->is_array() && tool_index <= last_calls->size()) {
                const ojson& call = (*last_calls)[tool_index - 1];
                tool_name = get(call.contains("function") ? call["function"] : call, "name");
            }
            if (tool_name.is_null()) {
                throw TokenizerError("a tool message has no resolvable tool name: give it `name`, or a `tool_call_id` "
                                     "matching a preceding assistant tool call");
            }
            b.open("message", {{"role", "tool"}, {"tool", python_str(tool_name)}, {"index", std::to_string(tool_index)}});
            b.content(get(m, "content"));
            b.close("message");
            b.end_of_msg();
        } else if (role == "assistant") {
            const ojson& calls = get(m, "tool_calls");
            last_calls = calls.is_null() ? nullptr : &calls;
            tool_index = 0;
            b.open("message", name_attrs("assistant"));
            render_assistant(b, m, o.thinking);
            b.close("message");
            b.end_of_msg();
        }
        // Other roles are not rendered (as upstream).
    }

    if (o.tool_choice == "required") {
        b.internal_system_message("tool-choice",
                                  "The system is invoked with `tool_choice=required`.\n"
                                  "You MUST call tools in the next message.");
    } else if (o.tool_choice == "none") {
        b.internal_system_message("tool-choice",
                                  "The system is invoked with `tool_choice=none`.\n"
                                  "You MUST NOT call any tools in the next message.");
    }

    const ojson& rf = o.response_format;
    const ojson rf_type = rf.is_object() ? get(rf, "type") : rf;
    if (rf_type == "json_object") {
        b.internal_system_message("response-format",
                                  "The system is invoked with `response_format=json_object`.\n"
                                  "Your response must be raw JSON data without markdown code blocks (```json) or any "
                                  "additional formatting.");
    } else if (rf_type == "json_schema") {
        b.internal_system_message("response-format",
                                  "The system is invoked with `response_format=json_schema`.\n"
                                  "Your response must be raw JSON data without markdown code blocks (```json) or any "
                                  "additional formatting.\n"
                                  "The JSON data must match the following schema:\n```json\n" +
                                      python_json_dumps(deep_sort(response_schema(rf)), true) + "\n```");
    }

    if (o.add_generation_prompt) {
        b.open("message", {{"role", "assistant"}});
        b.open(o.thinking ? "think" : "response");
    }
    b.check_images_consumed();
    return b.take();
}

void check_k3_vocabulary(const Tokenizer& tok) {
    for (const char* m : {open_token, close_token, sep_token, end_of_msg_token}) tok.require_special(m);
}

}  // namespace kiln::model
