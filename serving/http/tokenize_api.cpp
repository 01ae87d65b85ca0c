#include "serving/http/tokenize_api.hpp"

#include <fmt/format.h>

#include "model/tokenizer/tokenizer.hpp"
#include "serving/http/api_error.hpp"
#include "serving/http/openai_request.hpp"
#include "serving/http/prompt.hpp"

namespace kiln::serving::http {

Json tokenize(const ServedModel& model, const Json& body) {
    const Fields f(body);
    model.check_requested(f.string("model"));
    (void)f.boolean("add_special_tokens");
    const bool strs = f.boolean("return_token_strs").value_or(false);
    std::vector<TokenId> ids;
    if (f.has("messages")) {
        if (f.has("prompt")) f.fail("prompt", "give either prompt or messages, not both");
        ids = render_chat_prompt(model, parse_chat_request(body).chat);
    } else {
        auto prompt = f.string("prompt");
        if (!prompt) f.fail("prompt", "is required (or messages)");
        PromptInput in;
        in.text = *prompt;
        ids = encode_completion_prompt(model, in);
    }
    Json j;
    j["count"] = ids.size();
    j["max_model_len"] = model.max_model_len;
    j["tokens"] = ids;
    if (strs) {
        Json s = Json::array();
        for (TokenId id : ids) {
            const TokenId one[1] = {id};
            s.push_back(model.tokenizer->decode(one));
        }
        j["token_strs"] = std::move(s);
    } else {
        j["token_strs"] = nullptr;
    }
    return j;
}

Json detokenize(const ServedModel& model, const Json& body) {
    const Fields f(body);
    model.check_requested(f.string("model"));
    const Json* tokens = f.array("tokens");
    if (!tokens) f.fail("tokens", "is required");
    std::vector<TokenId> ids;
    const uint32_t vocab = model.tokenizer->vocab_size();
    for (size_t i = 0; i < tokens->size(); ++i) {
        const auto v = (*tokens)[i].is_number() ? as_integer((*tokens)[i]) : std::nullopt;
        if (!v || *v < 0 || *v >= int64_t(vocab))
            f.fail("tokens", fmt::format("item {} is not a token id of this vocabulary (0..{})", i, vocab - 1));
        ids.push_back(static_cast<TokenId>(*v));
    }
    return Json{{"prompt", model.tokenizer->decode(ids)}};
}

}  // namespace kiln::serving::http
