// `kiln tokenize` and `kiln detokenize`.
//
//   kiln tokenize [--model DIR | --preset k3-tiny] [--special] TEXT   ids separated by spaces
//   kiln detokenize [--model DIR | --preset k3-tiny] ID...            the decoded text
#include <charconv>
#include <iostream>
#include <iterator>
#include <memory>

#include <fmt/format.h>

#include "model/tokenizer/tokenizer.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/model_source.hpp"

namespace kiln::cli {

using namespace kiln::model;
using model::reference::ModelSource;

void add_tokenize_commands(CLI::App& app) {
    {
        auto* cmd = app.add_subcommand("tokenize", "Print the token ids of TEXT, separated by spaces");
        auto src = std::make_shared<ModelSource>();
        auto text = std::make_shared<std::string>();
        auto special = std::make_shared<bool>(false);
        add_tokenizer_source_options(*cmd, *src);
        cmd->add_flag("--special", *special, "recognise special-token names in TEXT (default: plain text)")
            ->envname("KILN_TOKENIZE_SPECIAL");
        cmd->add_option("text", *text, "text to tokenize; '-' reads standard input")->required();
        cmd->callback([src, text, special] {
            std::string input = *text;
            if (input == "-") input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
            const Tokenizer tok = open_tokenizer(*src, false);
            const auto ids = tok.encode(input, *special ? SpecialTokens::control : SpecialTokens::text);
            std::string out;
            for (size_t i = 0; i < ids.size(); ++i) {
                if (i) out += ' ';
                out += std::to_string(ids[i]);
            }
            out += '\n';
            write_stdout(out);
        });
    }
    {
        auto* cmd = app.add_subcommand("detokenize", "Print the text of token ids (invalid UTF-8 shown as U+FFFD)");
        auto src = std::make_shared<ModelSource>();
        auto ids = std::make_shared<std::vector<std::string>>();
        add_tokenizer_source_options(*cmd, *src);
        cmd->add_option("ids", *ids, "token ids")->required();
        cmd->callback([src, ids] {
            const Tokenizer tok = open_tokenizer(*src, false);
            std::vector<uint32_t> parsed;
            for (const auto& s : *ids) {
                uint64_t v = 0;
                const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
                if (ec != std::errc() || end != s.data() + s.size() || v >= tok.vocab_size()) {
                    throw kiln::InvalidArgument(
                        fmt::format("'{}' is not a token id (the vocabulary has ids 0..{})", s, tok.vocab_size() - 1));
                }
                parsed.push_back(static_cast<uint32_t>(v));
            }
            write_stdout(tok.decode(parsed));
        });
    }
}

}  // namespace kiln::cli
