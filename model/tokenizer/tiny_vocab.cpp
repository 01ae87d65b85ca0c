#include "model/tokenizer/tiny_vocab.hpp"

#include <map>
#include <mutex>

#include "model/tokenizer/bpe_trainer.hpp"
#include "model/tokenizer/tiktoken_file.hpp"
#include "model/tokenizer/training_corpus.hpp"

namespace kiln::model {

namespace {

const std::vector<std::string>& tiny_mergeable() {
    static const std::vector<std::string> tokens = [] {
        std::string corpus(embedded_corpus());
        corpus += generate_corpus(/*seed=*/3, /*bytes=*/600'000);
        return train_bpe(corpus, tiny_num_mergeable);
    }();
    return tokens;
}

}  // namespace

Vocabulary make_tiny_vocabulary(const SpecialNameTable& names) {
    Vocabulary v;
    v.mergeable = tiny_mergeable();
    v.specials = special_names_from_table(names, tiny_num_mergeable);
    return v;
}

Tokenizer make_tiny_tokenizer(const SpecialNameTable& names) { return Tokenizer(make_tiny_vocabulary(names)); }

void write_tiny_vocab(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    const Vocabulary v = make_tiny_vocabulary(k3_special_names());
    v.write_tiktoken(dir);
    write_file_atomic(dir / "tokenizer_config.json",
                      make_tokenizer_config(k3_special_names(), tiny_num_mergeable).dump(2) + "\n");
}

}  // namespace kiln::model
