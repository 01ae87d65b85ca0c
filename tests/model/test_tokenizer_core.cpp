// Tokenizer building blocks: UTF-8 handling, the 400k/25k splitting rules, the tiktoken file format
// and its errors, special-token names, BPE merge strategies, the tiny vocabulary on disk.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "model/preset.hpp"
#include "model/tokenizer/bpe.hpp"
#include "model/tokenizer/model_vocab.hpp"
#include "model/tokenizer/chunking.hpp"
#include "model/tokenizer/special_tokens.hpp"
#include "model/tokenizer/tiktoken_file.hpp"
#include "model/tokenizer/tiny_vocab.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "model/tokenizer/utf8.hpp"
#include "tests/model/tokenizer_test_support.hpp"

using namespace kiln::model;

namespace {

std::vector<std::string> split(std::string_view s, size_t max_chars, size_t max_run) {
    std::vector<std::string> out;
    for (auto v : split_for_encode(s, max_chars, max_run)) out.emplace_back(v);
    return out;
}

const std::string fffd = "\xEF\xBF\xBD";

std::string error_of(auto&& fn) {
    try {
        fn();
    } catch (const kiln::Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace

TEST_CASE("utf8: validation names the offset of the first ill-formed byte") {
    CHECK(utf8::find_invalid("plain ascii") == utf8::npos);
    CHECK(utf8::find_invalid("h\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80") == utf8::npos);
    CHECK(utf8::find_invalid("\xC0\x80") == 0);               // overlong
    CHECK(utf8::find_invalid("a\xED\xA0\x80") == 1);          // surrogate
    CHECK(utf8::find_invalid("ab\xE2\x82") == 2);             // truncated
    CHECK(utf8::find_invalid("abc\xF4\x90\x80\x80") == 3);    // above U+10FFFF
    const std::string msg = error_of([] { utf8::validate("ok\xFF", "input"); });
    CHECK(msg.find("input is not valid UTF-8") != std::string::npos);
    CHECK(msg.find("0xFF at byte offset 2") != std::string::npos);
}

TEST_CASE("utf8: lossy decoding replaces each maximal subpart once (Python's errors='replace')") {
    CHECK(utf8::decode_lossy("\xF0\x9F\x98" "A", true).text == fffd + "A");
    CHECK(utf8::decode_lossy("\xC0\x80", true).text == fffd + fffd);
    CHECK(utf8::decode_lossy("\xE0\x80\x80", true).text == fffd + fffd + fffd);
    CHECK(utf8::decode_lossy("\xF4\x90\x80\x80", true).text == fffd + fffd + fffd + fffd);
    CHECK(utf8::decode_lossy("\xED\xA0\x80x", true).text == fffd + fffd + fffd + "x");
    CHECK(utf8::decode_lossy("ok\xE2\x82", true).text == "ok" + fffd);
    // Not final: a valid but incomplete tail waits for more bytes.
    const auto d = utf8::decode_lossy("ok\xE2\x82", false);
    CHECK(d.text == "ok");
    CHECK(d.consumed == 2);
    CHECK(utf8::decode_lossy("ok\xE2\x41", false).text == "ok" + fffd + "A");
}

TEST_CASE("utf8: python isspace and strip") {
    for (char32_t c : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A,
                       0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
        CHECK(utf8::python_isspace(c));
    }
    for (char32_t c : {0x08, 0x21, 0x84, 0x180E, 0x200B, 0xFEFF, 0x3001, 0x41}) CHECK_FALSE(utf8::python_isspace(c));
    CHECK(utf8::python_strip("\u3000 \x1c" "a b\n\u2028") == "a b");
    CHECK(utf8::python_strip(" \t ") == "");
}

TEST_CASE("splitting: runs of more than 25,000 (here: N) whitespace or non-whitespace characters") {
    // The same cases tokenization_kimi.py's splitter is known to produce.
    CHECK(split("aaa", 100, 2) == std::vector<std::string>{"aa", "a"});
    CHECK(split("aaabbb", 100, 2) == std::vector<std::string>{"aa", "ab", "bb"});
    CHECK(split("aa  bb", 100, 5) == std::vector<std::string>{"aa  bb"});
    CHECK(split("ab   c", 100, 2) == std::vector<std::string>{"ab  ", " c"});
    // Python's isspace counts U+001C as whitespace.
    CHECK(split("a\x1c\x1c\x1c" "b", 100, 2) == std::vector<std::string>{"a\x1c\x1c", "\x1c" "b"});
    // Characters, not bytes.
    CHECK(split("中中中", 100, 2) == std::vector<std::string>{"中中", "中"});
    CHECK(split("", 100, 2).empty());
    // Chunks of max_chars code points, and the run counter restarts in each chunk.
    CHECK(split("abcdefghij", 4, 100) == std::vector<std::string>{"abcd", "efgh", "ij"});
    CHECK(split("aaaaaaaa", 5, 3) == std::vector<std::string>{"aaa", "aa", "aaa"});
    // The real limits.
    const std::string spaces(25'001, ' ');
    const std::string long_run = "x" + spaces + "y";
    const auto parts = split_for_encode(long_run);
    REQUIRE(parts.size() == 2);
    CHECK(parts[0] == "x" + std::string(25'000, ' '));
    CHECK(parts[1] == " y");
    CHECK(split_for_encode(std::string(400'001, 'a')).size() == 17);  // 16 slices in the first chunk, 1 in the second
}

TEST_CASE("tiktoken files: round trip and malformed input named by line") {
    CHECK(base64_decode(base64_encode("")) == "");
    for (const std::string& s : std::vector<std::string>{"a", "ab", "abc", "abcd", std::string("\0\xff\x80", 3)}) CHECK(base64_decode(base64_encode(s)) == s);
    CHECK(base64_encode("hi!") == "aGkh");

    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    tokens.push_back("ab");
    CHECK(parse_tiktoken(format_tiktoken(tokens), "t") == tokens);
    CHECK(parse_tiktoken("Yg== 1\n\nYQ== 0\n", "t") == std::vector<std::string>{"a", "b"});  // any order, blank lines

    auto err = [](std::string_view text) { return error_of([&] { parse_tiktoken(text, "vocab.model"); }); };
    CHECK(err("YQ== 0\nYg== 1\nbad\n") == "vocab.model:3: expected `base64 rank`, found 1 field");
    CHECK(err("YQ== 0\nYg== 0\n") == "vocab.model:2: rank 0 already defined on line 1");
    CHECK(err("YQ== 0\nYg== 2\n") == "vocab.model: rank 1 is missing (ranks must be 0..2 without gaps)");
    CHECK(err("YQ== 0\nY*== 1\n") == "vocab.model:2: bad base64 character '*'");
    CHECK(err("YQ== x\n") == "vocab.model:1: rank 'x' is not a non-negative integer");
    CHECK(err("YQ== 0 7\n") == "vocab.model:1: expected `base64 rank`, found 3 fields");
    CHECK(err("") == "vocab.model: no tokens");

    // Byte-level BPE needs all 256 single bytes; duplicate token bytes are refused.
    Vocabulary v;
    v.mergeable = {"a", "b"};
    v.specials = special_names_from_table({}, 2);
    CHECK(error_of([&] { Tokenizer t(v); }).find("lacks the single byte 0x00") != std::string::npos);
    v.mergeable = tokens;
    v.mergeable.push_back("ab");
    v.specials = special_names_from_table({}, static_cast<uint32_t>(v.mergeable.size()));
    CHECK(error_of([&] { Tokenizer t(v); }) == "duplicate token bytes in vocabulary");
}

TEST_CASE("special names: tokenizer_config.json and the K3 table") {
    const auto k3 = special_names_from_table(k3_special_names(), kimi_num_mergeable);
    REQUIRE(k3.size() == 256);
    CHECK(k3[0] == "[BOS]");
    CHECK(k3[163586 - 163584] == "<|end_of_msg|>");
    CHECK(k3[163587 - 163584] == "<|open|>");
    CHECK(k3[163588 - 163584] == "<|close|>");
    CHECK(k3[163589 - 163584] == "<|sep|>");
    CHECK(k3[163592 - 163584] == "<|reserved_token_163592|>");
    CHECK(k3[163649 - 163584] == "<osagent_mode>");
    CHECK(k3[255] == "[PAD]");

    auto config = nlohmann::json::parse(R"({"added_tokens_decoder": {
        "10": {"content": "[BOS]"}, "12": {"content": "<|open|>", "special": false},
        "99": {"content": "ignored"}, "5": {"content": "also ignored"}}})");
    const auto names = special_names_from_config(config, 10, "cfg");
    CHECK(names[0] == "[BOS]");
    CHECK(names[1] == "<|reserved_token_11|>");
    CHECK(names[2] == "<|open|>");
    config["added_tokens_decoder"]["13"] = {{"content", "<|open|>"}};
    CHECK(error_of([&] { special_names_from_config(config, 10, "cfg"); }) ==
          "cfg: special token '<|open|>' is used for two ids (second: 13)");
    config = nlohmann::json::parse(R"({"added_tokens_decoder": {"x1": {"content": "a"}}})");
    CHECK(error_of([&] { special_names_from_config(config, 10, "cfg"); }) ==
          "cfg: added_tokens_decoder key 'x1' is not a token id");
    config = nlohmann::json::parse(R"({"added_tokens_decoder": {"11": {"text": "a"}}})");
    CHECK(error_of([&] { special_names_from_config(config, 10, "cfg"); }) ==
          "cfg: added_tokens_decoder[\"11\"] has no string \"content\"");
}

TEST_CASE("tiny vocabulary: layout, written files read back identically") {
    const Tokenizer mem = make_tiny_tokenizer();
    CHECK(mem.num_mergeable() == tiny_num_mergeable);
    CHECK(mem.vocab_size() == 4096);
    CHECK(mem.require_special("[BOS]") == 3840);
    CHECK(mem.require_special("<|end_of_msg|>") == 3842);
    CHECK(mem.require_special("<|open|>") == 3843);
    CHECK(mem.require_special("<|close|>") == 3844);
    CHECK(mem.require_special("<|sep|>") == 3845);
    CHECK(mem.require_special("[PAD]") == 4095);
    CHECK(mem.token_bytes(3848) == "<|reserved_token_3848|>");
    CHECK_FALSE(mem.special_id("<|im_end|>").has_value());
    CHECK(error_of([&] { mem.require_special("<|im_end|>"); }) == "the vocabulary has no special token <|im_end|>");

    kiln::test::TempDir dir("tiny-vocab");
    write_tiny_vocab(dir.path / "model");
    CHECK(std::filesystem::exists(dir.path / "model" / "tiktoken.model"));
    CHECK(std::filesystem::exists(dir.path / "model" / "tokenizer_config.json"));
    const Tokenizer disk = Tokenizer::load(dir.path / "model");
    REQUIRE(disk.vocab_size() == mem.vocab_size());
    for (uint32_t id = 0; id < mem.vocab_size(); ++id) REQUIRE(disk.token_bytes(id) == mem.token_bytes(id));
    // The trained vocabulary has real multi-byte tokens in several scripts.
    const auto ids = mem.encode("the model 语言模型 người", SpecialTokens::text);
    CHECK(ids.size() * 3 < std::string("the model 语言模型 người").size() * 2);
    // Missing directory / file are clear errors.
    CHECK(error_of([&] { Tokenizer::load(dir.path / "nope"); }).find("does not exist") != std::string::npos);
    std::filesystem::create_directories(dir.path / "empty");
    CHECK(error_of([&] { Tokenizer::load(dir.path / "empty"); }).find("has no tiktoken.model") != std::string::npos);
}

TEST_CASE("a vocabulary that does not fit the model's config.json is refused, naming the files and the mismatch") {
    kiln::test::TempDir dir("model-vocab");
    const std::filesystem::path model = dir.path / "model";
    write_tiny_vocab(model);
    ModelConfig config = k3_tiny_config();
    auto write_config = [&](const ModelConfig& c) {
        std::ofstream(model / "config.json", std::ios::trunc) << to_json(c).dump(2);
    };
    write_config(config);
    CHECK(Tokenizer::load(model).vocab_size() == 4096);
    CHECK(load_model_tokenizer(model, config).vocab_size() == 4096);

    std::string full;
    {
        std::ifstream in(model / "tiktoken.model", std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        full = ss.str();
    }
    // Drop the last three ranks: still a valid tiktoken file, but every special id moves down by three.
    std::string truncated = full;
    for (int i = 0; i < 3; ++i) truncated.erase(truncated.rfind('\n', truncated.size() - 2) + 1);
    std::ofstream(model / "tiktoken.model", std::ios::binary | std::ios::trunc) << truncated;

    // tokenizer_config.json names [UNK] 4094 and [PAD] 4095, past the moved special range 3837..4092.
    std::string err = error_of([&] { Tokenizer::load(model); });
    CHECK(err.find("tokenizer_config.json") != std::string::npos);
    CHECK(err.find("tiktoken.model has 3837 tokens") != std::string::npos);
    CHECK(err.find("4094 '[UNK]'") != std::string::npos);
    CHECK(err.find("3837..4092") != std::string::npos);

    // Without tokenizer_config.json (K3 names by default), config.json's vocab_size catches it.
    std::filesystem::remove(model / "tokenizer_config.json");
    err = error_of([&] { Tokenizer::load(model); });
    CHECK(err.find("tiktoken.model has 3837 tokens") != std::string::npos);
    CHECK(err.find("config.json says vocab_size 4096") != std::string::npos);
    err = error_of([&] { load_model_tokenizer(model, config); });
    CHECK(err.find("config.json says vocab_size 4096") != std::string::npos);

    // The whole file again, but config.json names an ordinary token as the EOS.
    std::ofstream(model / "tiktoken.model", std::ios::binary | std::ios::trunc) << full;
    CHECK(Tokenizer::load(model).vocab_size() == 4096);
    config.eos_token_ids = {3842, 17};
    write_config(config);
    err = error_of([&] { Tokenizer::load(model); });
    CHECK(err.find("config.json: eos_token_id 17 is not a special token") != std::string::npos);
    CHECK(err.find("3840..4095") != std::string::npos);
    config.eos_token_ids = {3842};
    config.pad_token_id = 100;
    err = error_of([&] { load_model_tokenizer(model, config); });
    CHECK(err.find("pad_token_id 100 is not a special token") != std::string::npos);
}

TEST_CASE("encode: special tokens only in control mode; invalid input and ids are errors") {
    const Tokenizer tok = make_tiny_tokenizer();
    const std::string text = "say <|end_of_msg|> and [EOS] please";
    const auto plain = tok.encode(text, SpecialTokens::text);
    for (uint32_t id : plain) CHECK(id < tok.num_mergeable());
    CHECK(tok.decode(plain) == text);
    const auto ctrl = tok.encode(text, SpecialTokens::control);
    CHECK(std::count(ctrl.begin(), ctrl.end(), 3842u) == 1);
    CHECK(std::count(ctrl.begin(), ctrl.end(), 3841u) == 1);
    CHECK(tok.decode(ctrl) == text);
    CHECK(tok.encode("<|open|><|sep|>", SpecialTokens::control) == std::vector<uint32_t>{3843, 3845});
    CHECK(tok.encode("", SpecialTokens::control).empty());

    CHECK(error_of([&] { tok.encode("bad \xC3( byte", SpecialTokens::text); }) ==
          "text is not valid UTF-8: ill-formed byte 0xC3 at byte offset 4");
    CHECK(error_of([&] { tok.token_bytes(4096); }) == "token id 4096 is out of range (the vocabulary has 4096 ids)");
    const std::vector<uint32_t> bad = {1, 5000};
    CHECK_THROWS_AS(tok.decode(bad), TokenizerError);
    // decode() replaces a split character; decode_bytes() keeps the raw bytes.
    const uint32_t e2 = tok.ranks().find("\xE2");
    const std::vector<uint32_t> half = {e2};
    CHECK(tok.decode(half) == fffd);
    CHECK(tok.decode_bytes(half) == "\xE2");
}

TEST_CASE("bpe: heap merge equals the scan merge; long pieces are exact") {
    const Tokenizer tok = make_tiny_tokenizer();
    uint64_t s = 88172645463325252ull;
    auto next = [&] {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    };
    const char* alphabet[] = {"a", "e", "t", "h", "n", " ", "th", "er", "中", "文", "ư", "ờ", "😀", "1", "\n"};
    for (int trial = 0; trial < 300; ++trial) {
        std::string piece;
        const size_t len = 1 + next() % (trial < 250 ? 200 : 3000);
        while (piece.size() < len) piece += alphabet[next() % (sizeof alphabet / sizeof alphabet[0])];
        std::vector<uint32_t> a, b;
        byte_pair_encode_scan(tok.ranks(), piece, a);
        byte_pair_encode_heap(tok.ranks(), piece, b);
        REQUIRE(a == b);
        CHECK(tok.decode_bytes(a) == piece);
    }
}
