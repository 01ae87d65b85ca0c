// `kiln tokenize` / `kiln detokenize` through the built executable.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "model/tokenizer/tiny_vocab.hpp"
#include "tests/model/tokenizer_test_support.hpp"

using namespace kiln::model;

namespace {

struct Result {
    int rc;
    std::string out, err;
};

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

Result run(const std::string& args, const std::string& env = "") {
    static kiln::test::TempDir dir("cli");
    const std::string bin = kiln::test::env_or_fail("KILN_TEST_BIN");
    const auto err_path = dir.path / "stderr.txt";
    const std::string cmd = fmt::format("env -u KILN_MODEL -u KILN_PRESET {} {} {} 2>{}", env, quote(bin), args,
                                        quote(err_path.string()));
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    const int status = pclose(p);
    std::ifstream e(err_path);
    std::stringstream ss;
    ss << e.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, ss.str()};
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

    const Result r = run("tokenize --preset k3-tiny " + quote(text));
    CHECK(r.rc == 0);
    CHECK(r.out == join(ids) + "\n");

    const Result special = run("tokenize --preset k3-tiny --special " + quote(text));
    CHECK(special.out == join(tok.encode(text, SpecialTokens::control)) + "\n");

    const Result back = run("detokenize --preset k3-tiny " + join(ids));
    CHECK(back.rc == 0);
    CHECK(back.out == text);

    kiln::test::TempDir model("cli-model");
    write_tiny_vocab(model.path);
    CHECK(run("tokenize --model " + quote(model.path.string()) + " " + quote(text)).out == join(ids) + "\n");
    CHECK(run("tokenize " + quote(text), "KILN_PRESET=k3-tiny").out == join(ids) + "\n");
    CHECK(run("detokenize " + join(ids), "KILN_MODEL=" + quote(model.path.string())).out == text);
}

TEST_CASE("kiln tokenize / detokenize: one-line errors") {
    Result r = run("detokenize --preset k3-tiny 12 99999");
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
