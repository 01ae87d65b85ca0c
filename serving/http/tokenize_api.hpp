// POST /tokenize and POST /detokenize in vLLM's shapes:
//   /tokenize    {prompt, add_special_tokens = true, return_token_strs = false}
//             or {messages, add_generation_prompt = true, tools, chat_template_kwargs, return_token_strs}
//             -> {"count", "max_model_len", "tokens", "token_strs" (null unless asked)}
//   /detokenize  {tokens: [int]} -> {"prompt": text}
// Prompts are encoded exactly as the generation endpoints encode them (prompt.hpp). Kimi tokenizers
// add no BOS, so add_special_tokens changes nothing. Errors are ApiError 400 naming the field.
#pragma once

#include "serving/http/json_fields.hpp"
#include "serving/http/served_model.hpp"

namespace kiln::serving::http {

Json tokenize(const ServedModel& model, const Json& body);
Json detokenize(const ServedModel& model, const Json& body);

}  // namespace kiln::serving::http
