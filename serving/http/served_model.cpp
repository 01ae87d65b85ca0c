#include "serving/http/served_model.hpp"

#include <ctime>

#include <fmt/format.h>

#include "model/tokenizer/chat_k2.hpp"
#include "model/tokenizer/chat_k3.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "serving/http/api_error.hpp"

namespace kiln::serving::http {

const char* chat_template_name(ChatTemplate t) {
    switch (t) {
        case ChatTemplate::k3: return "k3";
        case ChatTemplate::k2: return "k2";
        case ChatTemplate::none: break;
    }
    return "none";
}

ChatTemplate detect_chat_template(const model::Tokenizer& tokenizer) {
    try {
        model::check_k3_vocabulary(tokenizer);
        return ChatTemplate::k3;
    } catch (const model::TokenizerError&) {
    }
    try {
        model::check_k2_vocabulary(tokenizer);
        return ChatTemplate::k2;
    } catch (const model::TokenizerError&) {
    }
    return ChatTemplate::none;
}

void ServedModel::check_requested(const std::optional<std::string>& requested) const {
    if (!requested) return;
    for (const auto& n : names)
        if (n == *requested) return;
    throw ApiError(404, fmt::format("The model `{}` does not exist.", *requested), "model", "model_not_found");
}

ServedModel make_served_model(std::vector<std::string> names, std::string root, uint32_t max_model_len,
                              const model::Tokenizer& tokenizer) {
    if (names.empty()) throw InvalidArgument("a served model needs at least one name");
    if (max_model_len < 2) throw InvalidArgument(fmt::format("max_model_len {} is too small", max_model_len));
    ServedModel m;
    m.names = std::move(names);
    m.root = std::move(root);
    m.max_model_len = max_model_len;
    m.tokenizer = &tokenizer;
    m.chat_template = detect_chat_template(tokenizer);
    m.created = static_cast<int64_t>(std::time(nullptr));
    return m;
}

}  // namespace kiln::serving::http
