#include "model/tokenizer/special_tokens.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "model/tokenizer/tokenizer_error.hpp"

namespace kiln::model {

const SpecialNameTable& k3_special_names() {
    static const SpecialNameTable t = {
        {0, "[BOS]"},
        {1, "[EOS]"},
        {2, "<|end_of_msg|>"},
        {3, "<|open|>"},
        {4, "<|close|>"},
        {5, "<|sep|>"},
        {6, "[start_header_id]"},
        {7, "[end_header_id]"},
        {9, "[EOT]"},
        {18, "<|media_begin|>"},
        {19, "<|media_content|>"},
        {20, "<|media_end|>"},
        {21, "<|media_pad|>"},
        {65, "<osagent_mode>"},
        {254, "[UNK]"},
        {255, "[PAD]"},
    };
    return t;
}

const SpecialNameTable& k2_special_names() {
    static const SpecialNameTable t = {
        {0, "[BOS]"},
        {1, "[EOS]"},
        {2, "<|im_end|>"},
        {3, "<|im_user|>"},
        {4, "<|im_assistant|>"},
        {6, "<|start_header_id|>"},
        {7, "<|end_header_id|>"},
        {9, "[EOT]"},
        {10, "<|im_system|>"},
        {11, "<|tool_calls_section_begin|>"},
        {12, "<|tool_calls_section_end|>"},
        {13, "<|tool_call_begin|>"},
        {14, "<|tool_call_argument_begin|>"},
        {15, "<|tool_call_end|>"},
        {17, "<|im_middle|>"},
        {18, "<|media_begin|>"},
        {19, "<|media_content|>"},
        {20, "<|media_end|>"},
        {21, "<|media_pad|>"},
        {22, "<think>"},
        {23, "</think>"},
        {254, "[UNK]"},
        {255, "[PAD]"},
    };
    return t;
}

std::vector<std::string> special_names_from_table(const SpecialNameTable& table, uint32_t n_mergeable) {
    std::vector<std::string> names(num_reserved_special);
    for (uint32_t i = 0; i < num_reserved_special; ++i) names[i] = fmt::format("<|reserved_token_{}|>", n_mergeable + i);
    for (const auto& [off, name] : table) names.at(off) = name;
    return names;
}

std::vector<std::pair<uint64_t, std::string>> added_tokens(const nlohmann::json& config, const std::string& source) {
    if (!config.is_object()) throw TokenizerError(fmt::format("{}: expected a JSON object", source));
    std::vector<std::pair<uint64_t, std::string>> out;
    const auto it = config.find("added_tokens_decoder");
    if (it == config.end()) return out;
    if (!it->is_object()) throw TokenizerError(fmt::format("{}: added_tokens_decoder must be an object", source));
    for (const auto& [key, entry] : it->items()) {
        uint64_t id = 0;
        try {
            size_t used = 0;
            id = std::stoull(key, &used);
            if (used != key.size() || key.empty() || key[0] < '0' || key[0] > '9') throw std::invalid_argument(key);
        } catch (const std::exception&) {
            throw TokenizerError(fmt::format("{}: added_tokens_decoder key '{}' is not a token id", source, key));
        }
        if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
            throw TokenizerError(fmt::format("{}: added_tokens_decoder[\"{}\"] has no string \"content\"", source, key));
        }
        std::string content = entry["content"].get<std::string>();
        if (content.empty()) throw TokenizerError(fmt::format("{}: token {} has empty content", source, id));
        out.emplace_back(id, std::move(content));
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> special_names_from_config(const nlohmann::json& config, uint32_t n_mergeable,
                                                   const std::string& source) {
    std::vector<std::string> names = special_names_from_table({}, n_mergeable);
    for (auto& [id, content] : added_tokens(config, source)) {
        if (id < n_mergeable || id >= n_mergeable + num_reserved_special) continue;
        names[id - n_mergeable] = std::move(content);
    }
    std::set<std::string_view> seen;
    for (uint32_t i = 0; i < num_reserved_special; ++i) {
        if (!seen.insert(names[i]).second) {
            throw TokenizerError(fmt::format("{}: special token '{}' is used for two ids (second: {})", source,
                                             names[i], n_mergeable + i));
        }
    }
    return names;
}

nlohmann::json make_tokenizer_config(const SpecialNameTable& table, uint32_t n_mergeable) {
    nlohmann::json decoder = nlohmann::json::object();
    std::vector<std::string> additional;
    auto name_at = [&](uint32_t off) -> std::string {
        for (const auto& [o, n] : table)
            if (o == off) return n;
        return {};
    };
    for (const auto& [off, name] : table) {
        // K3 marks its XTML markers non-special (they are kept by skip_special_tokens); mirror that.
        const bool special = !(name == "<|open|>" || name == "<|close|>" || name == "<|sep|>");
        decoder[std::to_string(n_mergeable + off)] = {
            {"content", name}, {"lstrip", false}, {"normalized", false},
            {"rstrip", false}, {"single_word", false}, {"special", special},
        };
        if (special && off != 0 && off != 1 && off != 254 && off != 255) additional.push_back(name);
    }
    return {
        {"added_tokens_decoder", decoder},
        {"additional_special_tokens", additional},
        {"bos_token", name_at(0)},
        {"eos_token", name_at(1)},
        {"unk_token", name_at(254)},
        {"pad_token", name_at(255)},
        {"model_max_length", 1048576},
        {"tokenizer_class", "TikTokenTokenizer"},
    };
}

}  // namespace kiln::model
