#include "model/tokenizer/tokenizer_cli.hpp"

#include <time.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include <fmt/format.h>

#include "model/tokenizer/tiny_vocab.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "model/tokenizer/training_corpus.hpp"

namespace kiln::model {

namespace {

struct Source {
    std::string model_dir;
    std::string preset;
};

void add_source_options(CLI::App& cmd, Source& s) {
    cmd.add_option("--model", s.model_dir, "model directory holding tiktoken.model and tokenizer_config.json")
        ->envname("KILN_MODEL");
    cmd.add_option("--preset", s.preset, "built-in vocabulary instead of a model directory (k3-tiny)")
        ->envname("KILN_PRESET");
}

Tokenizer open_tokenizer(const Source& s, bool default_tiny) {
    if (!s.model_dir.empty() && !s.preset.empty()) {
        throw kiln::InvalidArgument("give either --model or --preset, not both");
    }
    if (!s.model_dir.empty()) return Tokenizer::load(s.model_dir);
    if (s.preset == "k3-tiny" || (s.preset.empty() && default_tiny)) return make_tiny_tokenizer();
    if (s.preset.empty()) throw kiln::InvalidArgument("no vocabulary: give --model DIR or --preset k3-tiny");
    throw kiln::InvalidArgument(fmt::format("unknown preset '{}' (known: k3-tiny)", s.preset));
}

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void write_stdout(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

}  // namespace

void add_tokenizer_commands(CLI::App& app) {
    {
        auto* cmd = app.add_subcommand("tokenize", "Print the token ids of TEXT, separated by spaces");
        auto src = std::make_shared<Source>();
        auto text = std::make_shared<std::string>();
        auto special = std::make_shared<bool>(false);
        add_source_options(*cmd, *src);
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
        auto src = std::make_shared<Source>();
        auto ids = std::make_shared<std::vector<std::string>>();
        add_source_options(*cmd, *src);
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

void add_tokenizer_bench_commands(CLI::App& bench) {
    auto* cmd = bench.add_subcommand("tokenizer", "Encode/decode throughput on generated mixed-script text");
    auto src = std::make_shared<Source>();
    auto mb = std::make_shared<double>(4.0);
    add_source_options(*cmd, *src);
    cmd->add_option("--mb", *mb, "megabytes of text to encode (default 4)")->envname("KILN_BENCH_MB");
    cmd->callback([src, mb] {
        if (!(*mb > 0) || *mb > 4096) throw kiln::InvalidArgument("--mb must be in (0, 4096]");
        const Tokenizer tok = open_tokenizer(*src, true);
        const auto bytes = static_cast<size_t>(*mb * 1e6);
        std::string text(embedded_corpus());
        text += generate_corpus(/*seed=*/11, bytes > text.size() ? bytes - text.size() : 0);
        using clock = std::chrono::steady_clock;
        tok.encode("warm up the pattern and the JIT stack", SpecialTokens::text);
        const double c0 = thread_cpu_seconds();
        const auto t0 = clock::now();
        const auto ids = tok.encode(text, SpecialTokens::text);
        const auto t1 = clock::now();
        const double cpu = thread_cpu_seconds() - c0;
        const std::string back = tok.decode_bytes(ids);
        const auto t2 = clock::now();
        if (back != text) throw kiln::Error("bench tokenizer: decode(encode(text)) differs from the text");
        const double enc = std::chrono::duration<double>(t1 - t0).count();
        const double dec = std::chrono::duration<double>(t2 - t1).count();
        fmt::print("tokenizer: vocab {} ids, PCRE2 JIT {}\n", tok.vocab_size(), tok.jit() ? "on" : "off");
        fmt::print("encode: {:.2f} MB in {:.3f} s = {:.2f} MB/s ({:.2f} MB/s of CPU time), {} tokens "
                   "({:.2f} bytes/token, {:.0f} tokens/s)\n",
                   text.size() / 1e6, enc, text.size() / 1e6 / enc, text.size() / 1e6 / cpu, ids.size(),
                   static_cast<double>(text.size()) / static_cast<double>(ids.size()), ids.size() / enc);
        fmt::print("decode: {:.2f} MB/s\n", text.size() / 1e6 / dec);
    });
}

}  // namespace kiln::model
