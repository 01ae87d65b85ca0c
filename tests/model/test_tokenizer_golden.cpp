// Golden tests: kiln's tokenizer against Python's tiktoken (the reference implementation), loading the
// same vocabulary file with the original fancy-regex pattern. Ids must be identical on every case.
// Two generated vocabularies: the k3-tiny one and a larger one trained here on a different corpus.
// The tiktoken side runs in the project's .venv (installed by scripts/setup); missing it is a failure.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/tokenizer/bpe_trainer.hpp"
#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/special_tokens.hpp"
#include "model/tokenizer/tiktoken_file.hpp"
#include "model/tokenizer/tiny_vocab.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/training_corpus.hpp"
#include "model/tokenizer/utf8.hpp"
#include "tests/model/tokenizer_test_support.hpp"

using namespace kiln::model;
namespace fs = std::filesystem;

namespace {

struct Case {
    std::string text;
    bool special = false;
    std::string label;
};

std::string repeat(std::string_view s, size_t n) {
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
}

// NFD spelling of Vietnamese text: base letters followed by combining marks.
std::string vietnamese_nfd() {
    // "Tiếng Việt có dấu: người được" with every accent decomposed.
    return "Tie\xcc\x82\xcc\x81ng Vie\xcc\xa3\xcc\x82t co\xcc\x81 da\xcc\x82\xcc\x81u: ngu\xcc\x9bo\xcc\x9b\xcc\x80i "
           "\xc4\x91u\xcc\x9bo\xcc\x9b\xcc\xa3\x63 Vie\xcc\xa3\xcc\x82t Nam";
}

std::vector<Case> fixed_cases() {
    std::vector<Case> c = {
        {"Hello world! It's a test. We're here, they'll go; I'VE DONE IT. You'd've", false, "latin"},
        {"你好，世界。这是一个测试「引号」、还有〇和々。北京欢迎你！", false, "cjk"},
        {"東京は日本の首都です。서울은 한국의 수도입니다. ｶﾀｶﾅ ＡＢＣ１２３", false, "cjk-mixed"},
        {"Tiếng Việt có dấu: người được Việt Nam. Chúng tôi đang kiểm tra.", false, "vietnamese-nfc"},
        {vietnamese_nfd(), false, "vietnamese-nfd"},
        {"Emoji 👋🙂 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 👍🏽!! 🇯🇵🇻🇳 1️⃣", false, "emoji-zwj"},
        {"Digits 1234567890 12 3.14159 1,000,000 ١٢٣٤ ４５６ Ⅻ ½ 2024-07-27", false, "digits"},
        {"   leading spaces\n\n\n  trailing   \t\t\n  \n", false, "whitespace"},
        {"CRLF line\r\nnext line\r\n\r\n\r\nlast\r", false, "crlf"},
        {"def f(x):\n    return x ** 2  # comment\n\tif (a && b) { c->d(); }\n    }\n\n", false, "code"},
        {"#include <cstdio>\nint main() {\n  std::printf(\"%d\\n\", 42);\n  return 0;\n}\n", false, "code-c"},
        {"mixed\u00a0nbsp\u2003emsp\u3000ideographic\x1c" "fs\x1f" "us\u0085nel\u2028ls\u2029ps\x0bvt\x0c" "ff", false,
         "unicode-spaces"},
        {"ſ's 'S 'LL 'Ll don'T it'S WE'RE ǅungla ǈ ǋ ʰʱ ᴬᴮ", false, "case-folding"},
        {"Москва — столица России. Η Αθήνα. नमस्ते दुनिया। مرحبا بالعالم ภาษาไทย", false, "scripts"},
        {"soft\u00adhyphen zero\u200bwidth private\ue000use 𠀀𠀁 ⺀⺁ ㄅㄆ ㇀ 〇〡", false, "format-han"},
        {"", false, "empty"},
        {"a", false, "one-char"},
        {"<|open|>message<|sep|>[BOS] <|reserved_token_3900|> <|end_of_msg|>", false, "specials-as-text"},
        {"<|open|>message role=\"user\"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>", true, "specials-allowed"},
        {"x<|sep|><|sep|>y [EOS][PAD] <|open <|open|", true, "specials-adjacent"},
        // Runs around the 25,000 limit, and a text longer than 400,000 characters.
        {repeat(" ", 25'000), false, "spaces-25000"},
        {repeat(" ", 25'001) + "x", false, "spaces-25001"},
        {repeat(" ", 30'000) + "x", false, "spaces-30000"},
        {"abc" + repeat(" ", 60'001) + "yy" + repeat("\n", 25'001), false, "mixed-long-runs"},
        {repeat("a", 30'000), false, "letters-30000"},
        {repeat("ab1", 9'000), false, "nonspace-27000"},
        {repeat("中", 26'000), false, "han-26000"},
        {repeat("\t \n", 20'000), false, "whitespace-60000"},
        {repeat("😀", 25'500), false, "emoji-25500"},
    };
    std::string big = generate_corpus(5, 200'000);
    while (utf8::length(big) < 450'000) big += generate_corpus(big.size(), 200'000);
    c.push_back({big, false, "over-400k-chars"});
    c.push_back({std::string(embedded_corpus()), false, "embedded-corpus"});
    return c;
}

// Random strings over code points chosen to probe the regex: every letter/mark/number category,
// Han and its neighbours, each kind of whitespace, apostrophes and case variants.
std::vector<Case> fuzz_cases(size_t count) {
    static const char* pool[] = {
        "a", "b", "Z", "Q", " ", " ", " ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\u0085",
        "\u00a0", "\u1680", "\u2003", "\u2028", "\u3000", "0", "7", "9", "\u0663", "\u216b", "\u00bd", "'", "'",
        "s", "S", "t", "T", "re", "VE", "m", "ll", "D", "\u017f", "\u00e9", "e\u0301", "\u0301", "\u0308",
        "\u01c5", "\u02b0", "\u1d2c", "中", "文", "〇", "々", "〆", "。", "、", "「", "」", "ー", "ア", "あ", "한",
        "ㄱ", "!", "?", ".", ",", "-", "_", "(", ")", "{", "}", "#", "@", "$", "%", "€", "😀", "👍",
        "\U0001F3FD", "\u200d", "\ufe0f", "🏳", "ا", "ب", "\u064b", "क", "\u093e", "\u094d", "ท", "\u0e31",
        "\u00ad", "\u200b", "\ue000", "\U00020000", "\u2e80", "\u3105", "\u31c0", "ß", "Σ", "ς", "İ", "ǈ",
        "<|open|>", "<|sep|>", "[EOS]", "<|", "|>",
    };
    constexpr size_t pool_size = sizeof pool / sizeof pool[0];
    uint64_t s = 0x1234567;
    auto next = [&] {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    };
    std::vector<Case> out;
    for (size_t i = 0; i < count; ++i) {
        Case c;
        const size_t len = 1 + next() % 60;
        for (size_t k = 0; k < len; ++k) c.text += pool[next() % pool_size];
        c.special = (i % 4) == 3;
        c.label = fmt::format("fuzz-{}", i);
        out.push_back(std::move(c));
    }
    return out;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

fs::path venv_python() {
    const fs::path root = kiln::test::env_or_fail("KILN_TEST_SOURCE_ROOT");
    const fs::path py = root / ".venv" / "bin" / "python";
    REQUIRE_MESSAGE(fs::exists(py), "no " << py.string()
                                          << ": the golden tests need Python's tiktoken in the project's .venv; "
                                             "run scripts/setup");
    return py;
}

// Runs tiktoken on `cases` with the vocabulary in `dir`; returns one id list per case.
std::vector<std::vector<uint32_t>> tiktoken_reference(const fs::path& dir, const std::vector<Case>& cases) {
    const fs::path py = venv_python();
    const fs::path root = kiln::test::env_or_fail("KILN_TEST_SOURCE_ROOT");
    nlohmann::json spec;
    spec["pattern"] = kimi_pattern_original();
    spec["cases"] = nlohmann::json::array();
    for (const auto& c : cases) spec["cases"].push_back({{"text", c.text}, {"special", c.special}});
    const fs::path in = dir / "cases.json", out = dir / "reference.json", err = dir / "stderr.txt";
    std::ofstream(in, std::ios::binary) << spec.dump();
    const std::string cmd = fmt::format("'{}' -c 'import tiktoken' 2>'{}'", py.string(), err.string());
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0,
                    "Python's tiktoken is not installed in " << py.string() << " (" << slurp(err)
                                                             << "); run scripts/setup");
    const std::string run = fmt::format("'{}' '{}' '{}' '{}' '{}' 2>'{}'", py.string(),
                                        (root / "tests" / "model" / "tiktoken_golden.py").string(), dir.string(),
                                        in.string(), out.string(), err.string());
    REQUIRE_MESSAGE(std::system(run.c_str()) == 0, "tiktoken_golden.py failed: " << slurp(err));
    const auto parsed = nlohmann::json::parse(slurp(out));
    REQUIRE(parsed.size() == cases.size());
    std::vector<std::vector<uint32_t>> ids;
    for (const auto& a : parsed) ids.push_back(a.get<std::vector<uint32_t>>());
    return ids;
}

void compare_with_tiktoken(const fs::path& dir, const std::vector<Case>& cases) {
    const Tokenizer tok = Tokenizer::load(dir);
    const auto expected = tiktoken_reference(dir, cases);
    size_t mismatches = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto got = tok.encode(cases[i].text, cases[i].special ? SpecialTokens::control : SpecialTokens::text);
        if (got == expected[i]) continue;
        ++mismatches;
        size_t at = 0;
        while (at < got.size() && at < expected[i].size() && got[at] == expected[i][at]) ++at;
        const std::string snippet = cases[i].text.substr(0, 120);
        FAIL_CHECK("case " << cases[i].label << " (" << cases[i].text.size() << " bytes, \"" << snippet
                           << "\"): ids differ at position " << at << " of " << got.size() << " (tiktoken: "
                           << expected[i].size() << ")");
    }
    CHECK(mismatches == 0);
    // decode(encode(x)) == x on every plain case.
    for (const auto& c : cases) {
        if (!c.special) CHECK(tok.decode_bytes(tok.encode(c.text, SpecialTokens::text)) == c.text);
    }
}

}  // namespace

TEST_CASE("k3-tiny vocabulary: ids identical to tiktoken") {
    kiln::test::TempDir dir("golden-tiny");
    write_tiny_vocab(dir.path);
    auto cases = fixed_cases();
    auto fuzz = fuzz_cases(400);
    cases.insert(cases.end(), fuzz.begin(), fuzz.end());
    compare_with_tiktoken(dir.path, cases);
}

TEST_CASE("larger generated vocabulary (16k merges): ids identical to tiktoken") {
    kiln::test::TempDir dir("golden-16k");
    std::string corpus = generate_corpus(/*seed=*/99, 1'500'000);
    corpus += embedded_corpus();
    Vocabulary v;
    v.mergeable = train_bpe(corpus, 16'384);
    v.specials = special_names_from_table(k3_special_names(), static_cast<uint32_t>(v.mergeable.size()));
    v.write_tiktoken(dir.path);
    write_file_atomic(dir.path / "tokenizer_config.json",
                      make_tokenizer_config(k3_special_names(), static_cast<uint32_t>(v.mergeable.size())).dump());
    auto cases = fixed_cases();
    auto fuzz = fuzz_cases(200);
    cases.insert(cases.end(), fuzz.begin(), fuzz.end());
    compare_with_tiktoken(dir.path, cases);
}
