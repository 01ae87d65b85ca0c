// K3 chat rendering ("XTML"), with the semantics of encoding_k3.py's build_chat_segments:
//
//   open(tag, attrs)  = <|open|> tag ( ' key' '="' escaped-value '"' )* <|sep|>
//   close(tag)        = <|close|> tag <|sep|>
//   user/system turn  = open(message, role[, name]) content close(message) <|end_of_msg|>
//   assistant turn    = open(message, role=assistant[, name]) [open(think) reasoning close(think)]
//                       open(response) content close(response)
//                       [open(tools) (open(call, tool, index) (open(argument, key, type) value
//                        close(argument))* close(call))* close(tools)] close(message) <|end_of_msg|>
//   tool result       = open(message, role=tool, tool=name, index=i) content close(message) <|end_of_msg|>
//
// Each attribute is four text segments (' key', '="', the value with & and " escaped, '"'), as the
// released encoder emits them; the tokens differ from encoding ' key="value"' as one piece.
// Order: tool declarations, thinking-effort note, the conversation, tool-choice and response-format
// notes, then the generation prompt (open(message, role=assistant) + open(think) or open(response)).
// Tool results are re-ordered to follow the assistant's tool_calls (matched by tool_call_id).
// Messages are OpenAI chat messages (role, content as a string or a list of parts, name,
// tool_calls, tool_call_id, reasoning_content); parse them with ordered_json so tool-call arguments
// keep their order. Errors (unknown thinking effort, unnamed tool result, ...) throw TokenizerError.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/chat_segment.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace kiln::model {

struct K3ChatOptions {
    nlohmann::ordered_json tools;  // null or an array of OpenAI tool definitions
    bool add_generation_prompt = true;
    bool thinking = true;
    // "low", "high" or "max"; HF's apply_chat_template defaults it to "max" (so every thinking
    // prompt carries the note). nullopt leaves the note out. Ignored when thinking is off.
    std::optional<std::string> thinking_effort = "max";
    nlohmann::ordered_json tool_choice;      // "required" / "none" add a note; anything else none
    nlohmann::ordered_json response_format;  // {"type": "json_object"} or {"type": "json_schema", ...}
    // Replacements for each <|kimi_image_placeholder|> / image part (the vision processor's
    // media blocks); nullopt keeps the placeholder.
    std::optional<std::vector<std::string>> image_prompts;
};

inline constexpr const char* k3_image_placeholder = "<|kimi_image_placeholder|>";

ChatSegments render_k3_chat(const nlohmann::ordered_json& messages, const K3ChatOptions& options = {});

// Throws TokenizerError naming the first XTML marker (<|open|>, <|close|>, <|sep|>, <|end_of_msg|>)
// the vocabulary lacks.
void check_k3_vocabulary(const Tokenizer& tokenizer);

}  // namespace kiln::model
