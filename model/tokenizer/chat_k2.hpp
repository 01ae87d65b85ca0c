// The K2 / Kimi-Linear chat template (`<|im_*|>` markers), as segments:
//
//   [<|im_system|>tool_declare<|im_middle|>{tools as compact JSON}<|im_end|>]
//   [<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>]
//       (injected when the first message is not a system message)
//   per message: <|im_{user|assistant|system}|>{name or role}<|im_middle|>{body}<|im_end|>
//       (roles other than user/assistant use <|im_system|>)
//     assistant with tool_calls: {content}<|tool_calls_section_begin|>
//         (<|tool_call_begin|>{id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>)*
//         <|tool_calls_section_end|>   -- id is the call's `id`, or functions.{name}:{i} without one
//     tool result: ## Return of {tool_call_id}\n{content}
//   [<|im_assistant|>assistant<|im_middle|>[<think>]]   (generation prompt; <think> with thinking on)
//
// With thinking on, an assistant message carrying reasoning_content gets <think>{reasoning}</think>
// before its content. Image parts become <|media_begin|>image<|media_content|><|media_pad|><|media_end|>.
// Markers are control segments, everything between them one text segment, so the ids equal those of
// the rendered string except that marker-like text inside messages stays text. The vocabulary must
// carry the K2 names (Tokenizer::require_special reports a missing one).
#pragma once

#include <nlohmann/json.hpp>

#include "model/tokenizer/chat_segment.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace kiln::model {

struct K2ChatOptions {
    nlohmann::ordered_json tools;  // null or an array of OpenAI tool definitions
    bool add_generation_prompt = true;
    bool thinking = false;
};

inline constexpr const char* k2_default_system_prompt = "You are Kimi, an AI assistant created by Moonshot AI.";

ChatSegments render_k2_chat(const nlohmann::ordered_json& messages, const K2ChatOptions& options = {});

// Throws TokenizerError naming the first K2 marker the vocabulary lacks (a K3 vocabulary lacks them
// all: encoding K2 segments with it would silently turn the markers into plain text).
void check_k2_vocabulary(const Tokenizer& tokenizer);

}  // namespace kiln::model
