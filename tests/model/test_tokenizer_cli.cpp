// `kiln tokenize` / `kiln detokenize` through the built executable.
#include <doctest/doctest.h>

#include "model/tokenizer/tiny_vocab.hpp"
#include "tests/common/cli_runner.hpp"

using namespace kiln::model;
using kiln::test::shell_quote;

namespace {

kiln::test::CliResult run(const std::string& args, const std::string& env = "") {
    static kiln::test::Sandbox sb("tokenizer-cli");
    return kiln::test::run_kiln(sb, args, env);
}

std::string join(const std::vector<uint32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s;
}

}  // namespace

TEST_CASE("kiln tokenize / detokenize with the k3-tiny preset and a model directory") {
    const Tokenizer tok = make_tiny_tokenizer();
    const std::string text = "Xin chào 世界! <|open|> 👍🏽";
    const auto ids = tok.encode(text, SpecialTokens::text);

    const kiln::test::CliResult r = run("tokenize --preset k3-tiny " + shell_quote(text));
    CHECK(r.rc == 0);
    CHECK(r.out == join(ids) + "\n");

    const kiln::test::CliResult special = run("tokenize --preset k3-tiny --special " + shell_quote(text));
    CHECK(special.out == join(tok.encode(text, SpecialTokens::control)) + "\n");

    const kiln::test::CliResult back = run("detokenize --preset k3-tiny " + join(ids));
    CHECK(back.rc == 0);
    CHECK(back.out == text);

    kiln::test::TempDir model("cli-model");
    write_tiny_vocab(model.path);
    CHECK(run("tokenize --model " + shell_quote(model.path.string()) + " " + shell_quote(text)).out == join(ids) + "\n");
    CHECK(run("tokenize " + shell_quote(text), "KILN_PRESET=k3-tiny").out == join(ids) + "\n");
    CHECK(run("detokenize " + join(ids), "KILN_MODEL=" + shell_quote(model.path.string())).out == text);
}

TEST_CASE("kiln tokenize / detokenize: one-line errors") {
    kiln::test::CliResult r = run("detokenize --preset k3-tiny 12 99999");
    CHECK(r.rc == 1);
    CHECK(r.err == "kiln: error: '99999' is not a token id (the vocabulary has ids 0..4095)\n");
    r = run("tokenize hello");
    CHECK(r.rc == 1);
    CHECK(r.err == "kiln: error: no vocabulary: give --model DIR or --preset k3-tiny\n");
    r = run("tokenize --preset k3-huge hello");
    CHECK(r.err == "kiln: error: unknown preset 'k3-huge' (known: k3-tiny)\n");
    r = run("tokenize --model /nonexistent/dir hello");
    CHECK(r.err == "kiln: error: model directory /nonexistent/dir does not exist\n");
    r = run("tokenize --preset k3-tiny \"$(printf 'bad \\377 byte')\"");
    CHECK(r.err == "kiln: error: text is not valid UTF-8: ill-formed byte 0xFF at byte offset 4\n");
}
