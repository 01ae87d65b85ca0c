// Streaming detokenisation: multi-byte characters split across tokens are held back, never emitted
// half; ill-formed bytes become U+FFFD; the chunks always add up to Tokenizer::decode.
#include <doctest/doctest.h>

#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tiny_vocab.hpp"
#include "model/tokenizer/tokenizer_error.hpp"
#include "model/tokenizer/utf8.hpp"

using namespace kiln::model;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

const Tokenizer& tok() {
    static const Tokenizer t = make_tiny_tokenizer();
    return t;
}

uint32_t byte_id(unsigned char b) {
    const char c = static_cast<char>(b);
    return tok().ranks().find(std::string_view(&c, 1));
}

std::vector<uint32_t> byte_ids(std::string_view s) {
    std::vector<uint32_t> ids;
    for (char c : s) ids.push_back(byte_id(static_cast<unsigned char>(c)));
    return ids;
}

}  // namespace

TEST_CASE("a character split over single-byte tokens is emitted whole") {
    StreamDecoder d(tok());
    const auto ids = byte_ids("€");  // E2 82 AC
    CHECK(d.push(ids[0]) == "");
    CHECK(d.pending_bytes() == 1);
    CHECK(d.push(ids[1]) == "");
    CHECK(d.pending_bytes() == 2);
    CHECK(d.push(ids[2]) == "€");
    CHECK(d.pending_bytes() == 0);
    CHECK(d.finish() == "");

    StreamDecoder e(tok());
    std::string out;
    for (uint32_t id : byte_ids("a👍🏽b")) {
        const std::string chunk = e.push(id);
        CHECK(utf8::find_invalid(chunk) == utf8::npos);
        out += chunk;
    }
    out += e.finish();
    CHECK(out == "a👍🏽b");
}

TEST_CASE("tokens that end mid-character: every chunk is valid UTF-8 and they add up") {
    // Tokens covering parts of characters: bytes of a 4-byte emoji as [F0 9F] [98] [80 + text].
    const std::string text = "héllo 世界 👍🏽 người Việt — done ✅";
    for (int mode = 0; mode < 2; ++mode) {
        const std::vector<uint32_t> ids = mode == 0 ? tok().encode(text, SpecialTokens::text) : byte_ids(text);
        StreamDecoder d(tok());
        std::string out;
        size_t held = 0;
        for (uint32_t id : ids) {
            const std::string chunk = d.push(id);
            CHECK(utf8::find_invalid(chunk) == utf8::npos);
            held += d.pending_bytes() > 0;
            out += chunk;
        }
        out += d.finish();
        CHECK(out == text);
        if (mode == 1) CHECK(held > 0);
    }
}

TEST_CASE("ill-formed bytes become U+FFFD; an unfinished character is flushed as one U+FFFD") {
    StreamDecoder d(tok());
    CHECK(d.push(byte_id(0xFF)) == fffd);
    CHECK(d.push(byte_id(0xE2)) == "");
    CHECK(d.push(byte_id('A')) == fffd + "A");
    CHECK(d.push(byte_id(0xF0)) == "");
    CHECK(d.push(byte_id(0x9F)) == "");
    CHECK(d.finish() == fffd);
    CHECK(d.pending_bytes() == 0);
    CHECK(d.finish() == "");
}

TEST_CASE("random token streams: chunks equal batch decode") {
    uint64_t s = 0xDEADBEEF;
    auto next = [&] {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    };
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<uint32_t> ids;
        const size_t n = 1 + next() % 40;
        for (size_t i = 0; i < n; ++i) {
            // Mostly single bytes in the UTF-8 lead/continuation range, some whole tokens.
            ids.push_back(next() % 3 == 0 ? static_cast<uint32_t>(next() % tok().num_mergeable())
                                          : byte_id(static_cast<unsigned char>(0x80 + next() % 0x78)));
        }
        StreamDecoder d(tok());
        std::string out;
        for (uint32_t id : ids) {
            const std::string chunk = d.push(id);
            REQUIRE(utf8::find_invalid(chunk) == utf8::npos);
            out += chunk;
        }
        out += d.finish();
        CHECK(out == tok().decode(ids));
    }
}

TEST_CASE("special tokens: names by default, skipped on request; unknown ids throw without state change") {
    const uint32_t open = tok().require_special("<|open|>");
    StreamDecoder d(tok());
    CHECK(d.push(open) == "<|open|>");
    StreamDecoder quiet(tok(), /*skip_special=*/true);
    CHECK(quiet.push(byte_id(0xE2)) == "");
    CHECK(quiet.push(open) == "");
    CHECK_THROWS_AS(quiet.push(99'999), TokenizerError);
    CHECK(quiet.pending_bytes() == 1);
    CHECK(quiet.push(byte_id(0x82)) == "");
    CHECK(quiet.push(byte_id(0xAC)) == "€");
}
