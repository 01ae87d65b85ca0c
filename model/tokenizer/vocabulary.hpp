// A Kimi vocabulary as data: the mergeable tokens (bytes by rank, ids 0..N-1) and the names of the
// 256 special ids N..N+255. Loaded from a model directory (tiktoken.model + tokenizer_config.json)
// or built in memory (the k3-tiny preset).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kiln::model {

struct Vocabulary {
    std::vector<std::string> mergeable;  // token bytes, indexed by rank
    std::vector<std::string> specials;   // 256 names; id = mergeable.size() + index

    // Reads dir/tiktoken.model and the special names from dir/tokenizer_config.json. Without a
    // tokenizer_config.json the K3 names are used (with a warning). A token that added_tokens_decoder
    // names outside the 256 ids after the mergeable ranks (a truncated or foreign tiktoken.model) is an
    // error naming both files.
    static Vocabulary load(const std::filesystem::path& dir);

    // Writes dir/tiktoken.model (and nothing else), atomically.
    void write_tiktoken(const std::filesystem::path& dir) const;
};

}  // namespace kiln::model
