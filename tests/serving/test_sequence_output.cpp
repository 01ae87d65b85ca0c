// Stop conditions and incremental text of one sequence (serving/sampler/sequence_output.hpp), over the
// k3-tiny tokenizer; and the mapping of the API's sampling fields onto the device's.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/tokenizer/tiny_vocab.hpp"
#include "serving/sampler/device_sampling.hpp"
#include "serving/sampler/sequence_output.hpp"

using namespace kiln::serving;
using kiln::serving::sampler::OutputDelta;
using kiln::serving::sampler::SequenceOutput;

namespace {

const kiln::model::Tokenizer& tok() {
    static const kiln::model::Tokenizer t = kiln::model::make_tiny_tokenizer();
    return t;
}

TokenId eos() { return *tok().special_id("[EOS]"); }

// The token whose bytes are exactly `bytes`.
TokenId token_of(const std::string& bytes) {
    for (TokenId id = 0; id < tok().num_mergeable(); ++id)
        if (tok().token_bytes(id) == bytes) return id;
    FAIL("no token for the bytes");
    return 0;
}

std::vector<TokenId> chars(const std::string& s) {
    std::vector<TokenId> out;
    for (char c : s) out.push_back(token_of(std::string(1, c)));
    return out;
}

struct Run {
    std::string text;
    std::vector<OutputDelta> deltas;
    size_t pushed = 0;
};

Run feed(SequenceOutput& out, const std::vector<TokenId>& tokens) {
    Run r;
    for (TokenId t : tokens) {
        if (out.finished()) break;
        r.deltas.push_back(out.push(t));
        r.text += r.deltas.back().text;
        ++r.pushed;
    }
    return r;
}

SamplingParams params(uint32_t max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    return p;
}

}  // namespace

TEST_CASE("sequence output: the text of every token, then length at max_tokens") {
    SequenceOutput out(tok(), params(11), {eos()});
    const Run r = feed(out, chars("hello world!!"));
    CHECK(r.pushed == 11);
    CHECK(r.text == "hello world");
    REQUIRE(r.deltas.back().finish);
    CHECK(*r.deltas.back().finish == FinishReason::length);
    for (size_t i = 0; i + 1 < r.deltas.size(); ++i) CHECK_FALSE(r.deltas[i].finish);
    CHECK_THROWS_AS(out.push(token_of("x")), kiln::InvalidArgument);
}

TEST_CASE("sequence output: a stop string cuts the text, or keeps itself with include_stop_str_in_output") {
    for (bool include : {false, true}) {
        SamplingParams p = params(100);
        p.stop = {"xyz", "wor"};
        p.include_stop_str_in_output = include;
        SequenceOutput out(tok(), p, {eos()});
        const Run r = feed(out, chars("hello world"));
        CHECK(r.pushed == 9);
        CHECK(r.text == (include ? "hello wor" : "hello "));
        REQUIRE(r.deltas.back().finish);
        CHECK(*r.deltas.back().finish == FinishReason::stop);
        CHECK(r.deltas.back().stop_string == "wor");
        CHECK_FALSE(r.deltas.back().stop_token);
    }
}

TEST_CASE("sequence output: the stop string that starts first wins") {
    SamplingParams p = params(100);
    p.stop = {"lo", "el", "hel"};
    SequenceOutput out(tok(), p, {eos()});
    const Run r = feed(out, chars("hello"));
    CHECK(r.pushed == 3);
    CHECK(r.text.empty());
    CHECK(r.deltas.back().stop_string == "hel");
}

TEST_CASE("sequence output: text that may begin a stop string is held back until it cannot") {
    SamplingParams p = params(14);
    p.stop = {"lo wx", "d!?"};
    SequenceOutput out(tok(), p, {eos()});
    const std::string text = "hello world!!!";
    std::string emitted;
    for (size_t i = 0; i < text.size(); ++i) {
        const OutputDelta d = out.push(token_of(text.substr(i, 1)));
        emitted += d.text;
        const std::string seen = text.substr(0, i + 1);
        CHECK(seen.compare(0, emitted.size(), emitted) == 0);
        if (d.finish) break;
        // What is held is exactly the longest tail that is a proper prefix of a stop string.
        const std::string held = seen.substr(emitted.size());
        size_t want = 0;
        for (const std::string& s : p.stop)
            for (size_t k = 1; k < s.size() && k <= seen.size(); ++k)
                if (seen.compare(seen.size() - k, k, s, 0, k) == 0) want = std::max(want, k);
        CHECK(held.size() == want);
    }
    CHECK(emitted == text);  // no stop matched: everything comes out at the finish
    CHECK(out.finished());
}

TEST_CASE("sequence output: EOS and stop ids stop once min_tokens are out; ignore_eos keeps going") {
    const TokenId a = token_of("a"), b = token_of("b");
    SUBCASE("EOS before min_tokens is an ordinary token") {
        SamplingParams p = params(100);
        p.min_tokens = 3;
        SequenceOutput out(tok(), p, {eos()});
        const Run r = feed(out, {a, eos(), b, eos(), a});
        CHECK(r.pushed == 4);
        CHECK(r.text == "ab");  // special tokens produce no text
        CHECK(r.deltas.back().stop_token == eos());
        CHECK(*r.deltas.back().finish == FinishReason::stop);
    }
    SUBCASE("a stop id finishes; its text is cut unless include_stop_str_in_output") {
        for (bool include : {false, true}) {
            SamplingParams p = params(100);
            p.stop_token_ids = {b};
            p.include_stop_str_in_output = include;
            SequenceOutput out(tok(), p, {eos()});
            const Run r = feed(out, {a, a, b, a});
            CHECK(r.pushed == 3);
            CHECK(r.text == (include ? "aab" : "aa"));
            CHECK(r.deltas.back().stop_token == b);
        }
    }
    SUBCASE("ignore_eos") {
        SamplingParams p = params(4);
        p.ignore_eos = true;
        SequenceOutput out(tok(), p, {eos()});
        const Run r = feed(out, {a, eos(), eos(), b, a});
        CHECK(r.pushed == 4);
        CHECK(*r.deltas.back().finish == FinishReason::length);
    }
    SUBCASE("stop strings wait for min_tokens too") {
        SamplingParams p = params(100);
        p.stop = {"b"};
        p.min_tokens = 3;
        SequenceOutput out(tok(), p, {eos()});
        const Run r = feed(out, {b, a, a, b});
        CHECK(r.pushed == 4);
        CHECK(r.text == "baa");
    }
}

TEST_CASE("sequence output: a full context finishes with length") {
    SequenceOutput out(tok(), params(100), {eos()});
    CHECK_FALSE(out.push(token_of("a")).finish);
    const OutputDelta d = out.push(token_of("b"), true);
    CHECK(*d.finish == FinishReason::length);
    CHECK(d.text == "b");
}

TEST_CASE("sequence output: a character split over two tokens comes out whole") {
    const TokenId lead = token_of("\xC3"), cont = token_of("\xA9");
    SequenceOutput out(tok(), params(3), {eos()});
    CHECK(out.push(lead).text.empty());
    CHECK(out.push(cont).text == "\xC3\xA9");
    const OutputDelta d = out.push(lead);  // cut short by max_tokens: one replacement character
    CHECK(d.text == "\xEF\xBF\xBD");
}

TEST_CASE("device sampling: fields, seed + index, what the step must carry") {
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_p = 0.9f;
    p.top_k = -1;
    p.min_p = 0.05f;
    p.seed = 41;
    p.logprobs = 3;
    const auto s = sampler::device_sampling(p, 2);
    CHECK(s.temperature == doctest::Approx(0.7f));
    CHECK(s.top_p == doctest::Approx(0.9f));
    CHECK(s.top_k == 0);
    CHECK(s.min_p == doctest::Approx(0.05f));
    CHECK(s.seeded);
    CHECK(s.seed == 43);
    CHECK(s.want_logprobs);
    CHECK(s.logprobs == 3);
    CHECK_FALSE(sampler::needs_prompt(s));
    CHECK(sampler::needs_output(s));
    SamplingParams q;
    q.repetition_penalty = 1.2f;
    const auto t = sampler::device_sampling(q, 0);
    CHECK_FALSE(t.seeded);
    CHECK_FALSE(t.want_logprobs);
    CHECK(sampler::needs_prompt(t));
    CHECK(sampler::needs_output(t));
    CHECK_FALSE(sampler::needs_output(sampler::device_sampling(SamplingParams{}, 0)));
}
