// What the HTTP layer knows about the model it serves: the names clients may ask for, the context
// length, the tokenizer prompts are encoded with and the chat format they are rendered in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serving/engine/request.hpp"

namespace kiln::model {
class Tokenizer;
}

namespace kiln::serving::http {

// K3's XTML (model/tokenizer/chat_k3.hpp) or the K2 / Kimi-Linear template (chat_k2.hpp).
enum class ChatTemplate { none, k3, k2 };

const char* chat_template_name(ChatTemplate t);  // "none", "k3", "k2"

// The vocabulary decides: K3 markers (<|open|>, <|close|>, ...) -> k3, else K2 markers -> k2, else none.
ChatTemplate detect_chat_template(const model::Tokenizer& tokenizer);

struct ServedModel {
    std::vector<std::string> names;      // accepted in "model"; names[0] is the id /v1/models lists
    std::string root;                    // the checkpoint directory or preset it came from
    uint32_t max_model_len = 0;          // prompt + generated tokens
    const model::Tokenizer* tokenizer = nullptr;  // must outlive the server
    ChatTemplate chat_template = ChatTemplate::none;
    SamplingParams defaults;             // unset request fields take these
    int64_t created = 0;                 // Unix seconds, for /v1/models

    const std::string& name() const { return names.front(); }
    // Throws ApiError 404 (model_not_found) unless `requested` is unset or one of `names`.
    void check_requested(const std::optional<std::string>& requested) const;
};

// A ServedModel for `tokenizer` with the chat template detected from its vocabulary.
ServedModel make_served_model(std::vector<std::string> names, std::string root, uint32_t max_model_len,
                              const model::Tokenizer& tokenizer);

}  // namespace kiln::serving::http
