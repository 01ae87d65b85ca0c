// From a parsed request to prompt token ids, and max_tokens fitted to the context.
//
// Chat messages are rendered with the served model's chat format (K3 XTML or the K2 template) into
// segments and encoded segment by segment. Completions text is encoded with the vocabulary's
// special-token strings recognised (what HF tokenizers, and so vLLM, do for a text prompt); token-id
// prompts are checked against the vocabulary. Failures are ApiError 400 naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "serving/http/openai_request.hpp"
#include "serving/http/served_model.hpp"

namespace kiln::serving::http {

std::vector<TokenId> render_chat_prompt(const ServedModel& model, const ChatInput& chat);
std::vector<TokenId> encode_completion_prompt(const ServedModel& model, const PromptInput& prompt);

// The max_tokens to generate after a prompt of `prompt_tokens`: `requested` clamped to the rest of
// the context (vLLM), or by default the rest (chat) / 16 (completions). Throws ApiError 400
// (code context_length_exceeded, param messages / prompt) when the prompt leaves no room for one
// token or is longer than `max_prompt_tokens` (0: no limit beyond the context).
uint32_t fit_max_tokens(const ServedModel& model, Api api, size_t prompt_tokens, std::optional<int64_t> requested,
                        size_t max_prompt_tokens = 0);

}  // namespace kiln::serving::http
