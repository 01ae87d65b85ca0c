#include "serving/http/prompt.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "model/tokenizer/chat_k2.hpp"
#include "model/tokenizer/chat_k3.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "serving/http/api_error.hpp"

namespace kiln::serving::http {

namespace {

bool structured_output(const Json& response_format) {
    return response_format.is_object() && response_format.contains("type") && response_format["type"] != "text";
}

}  // namespace

std::vector<TokenId> render_chat_prompt(const ServedModel& model, const ChatInput& chat) {
    model::ChatSegments segments;
    try {
        switch (model.chat_template) {
            case ChatTemplate::k3: {
                model::K3ChatOptions o;
                o.tools = chat.tools;
                o.add_generation_prompt = chat.add_generation_prompt;
                if (chat.thinking) o.thinking = *chat.thinking;
                if (chat.thinking_effort) o.thinking_effort = *chat.thinking_effort;
                o.tool_choice = chat.tool_choice;
                o.response_format = chat.response_format;
                segments = model::render_k3_chat(chat.messages, o);
                break;
            }
            case ChatTemplate::k2: {
                if (structured_output(chat.response_format))
                    throw ApiError::bad_request(
                        "response_format: structured output is not supported for this model's chat format",
                        "response_format");
                model::K2ChatOptions o;
                o.tools = chat.tools;
                o.add_generation_prompt = chat.add_generation_prompt;
                if (chat.thinking) o.thinking = *chat.thinking;
                segments = model::render_k2_chat(chat.messages, o);
                break;
            }
            case ChatTemplate::none:
                throw ApiError::bad_request("this model has no chat format; use /v1/completions", "messages");
        }
        return model.tokenizer->encode_segments(segments);
    } catch (const model::TokenizerError& e) {
        throw ApiError::bad_request(fmt::format("messages: {}", e.what()), "messages");
    }
}

std::vector<TokenId> encode_completion_prompt(const ServedModel& model, const PromptInput& prompt) {
    if (!prompt.is_ids) {
        try {
            return model.tokenizer->encode(prompt.text, model::SpecialTokens::control);
        } catch (const model::TokenizerError& e) {
            throw ApiError::bad_request(fmt::format("prompt: {}", e.what()), "prompt");
        }
    }
    const uint32_t vocab = model.tokenizer->vocab_size();
    for (TokenId id : prompt.ids)
        if (id >= vocab)
            throw ApiError::bad_request(
                fmt::format("prompt: token id {} is out of the vocabulary (size {})", id, vocab), "prompt");
    return prompt.ids;
}

uint32_t fit_max_tokens(const ServedModel& model, Api api, size_t prompt_tokens, std::optional<int64_t> requested,
                        size_t max_prompt_tokens) {
    const char* param = api == Api::chat ? "messages" : "prompt";
    const char* what = api == Api::chat ? "messages" : "prompt";
    if (prompt_tokens >= model.max_model_len)
        throw ApiError(400,
                       fmt::format("This model's maximum context length is {} tokens. However, your request has {} "
                                   "input tokens. Please reduce the length of the {}.",
                                   model.max_model_len, prompt_tokens, what),
                       param, "context_length_exceeded");
    if (max_prompt_tokens > 0 && prompt_tokens > max_prompt_tokens)
        throw ApiError(400,
                       fmt::format("The prompt has {} tokens, more than this server's limit of {}. Please reduce the "
                                   "length of the {}.",
                                   prompt_tokens, max_prompt_tokens, what),
                       param, "context_length_exceeded");
    const int64_t room = int64_t(model.max_model_len) - int64_t(prompt_tokens);
    const int64_t want = requested ? *requested : (api == Api::chat ? room : int64_t(16));
    return static_cast<uint32_t>(std::clamp<int64_t>(want, 1, room));
}

}  // namespace kiln::serving::http
