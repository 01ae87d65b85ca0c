// `kiln generate` / `kiln bench reference` through the built executable (KILN_TEST_BIN).
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln_config.h"
#include "model/checkpoint.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "model/reference/forward.hpp"
#include "model/reference/generate.hpp"
#include "tests/common/cli_runner.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tiny_vocab.hpp"
#endif

using namespace kiln::model;
using namespace kiln::model::reference;
namespace fs = std::filesystem;
using Run = kiln::test::CliResult;

namespace {

// Runs the kiln binary with `args` (shell words) in a sandbox of its own.
Run run_kiln(const std::string& args) {
    kiln::test::Sandbox sb("generate-cli");
    return kiln::test::run_kiln(sb, args);
}

std::string join_ids(const std::vector<uint32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s;
}

}  // namespace

TEST_CASE("kiln generate --ids: greedy output is deterministic and equals the in-process decoding loop") {
    Run a = run_kiln("generate --preset k3-tiny --max-tokens 8 --ignore-eos --print-ids --ids 5,17,300,42");
    Run b = run_kiln("generate --preset k3-tiny --max-tokens 8 --ignore-eos --print-ids --ids '5 17 300 42'");
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    CHECK(a.out == b.out);

    kiln::test::TempDir model_dir("gen-model");
    const fs::path dir = model_dir.path / "model";
    ModelConfig c = preset_config("k3-tiny");
    write_model(c, dir);
    std::vector<uint32_t> ids;
    {
        Checkpoint ck = Checkpoint::open(dir);
        ReferenceModel m(c, ck);
        ids = generate(m, std::vector<uint32_t>{5, 17, 300, 42}, 8, SamplingParams{}, {}).ids;
    }
    CHECK(a.out == join_ids(ids) + "\n");

    // --model DIR gives the same as the in-memory preset.
    Run d = run_kiln(fmt::format("generate --model '{}' --max-tokens 8 --ignore-eos --print-ids --ids 5,17,300,42", dir.string()));
    CHECK(d.rc == 0);
    CHECK(d.out == a.out);
}

TEST_CASE("kiln generate: seeded sampling is reproducible, seeds differ") {
    auto run = [](int seed) {
        return run_kiln(fmt::format("generate --max-tokens 12 --ignore-eos --print-ids --temperature 1.0 --top-p 0.95 "
                                "--seed {} --ids 1,2,3",
                                seed));
    };
    Run a = run(3), b = run(3), c = run(4);
    REQUIRE(a.rc == 0);
    CHECK(a.out == b.out);
    CHECK(a.out != c.out);
}

#if KILN_HAVE_TOKENIZER
TEST_CASE("kiln generate \"prompt\": streams decoded text; equals decoding the greedy ids") {
    Run a = run_kiln("generate --preset k3-tiny --max-tokens 6 --ignore-eos \"The capital of France is\"");
    Run b = run_kiln("generate --preset k3-tiny --max-tokens 6 --ignore-eos --print-ids \"The capital of France is\"");
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    Tokenizer tok = make_tiny_tokenizer();
    std::vector<uint32_t> ids;
    std::istringstream in(b.out);
    for (uint32_t id; in >> id;) ids.push_back(id);
    CHECK(ids.size() == 6);
    CHECK(a.out == tok.decode(ids) + "\n");
    // Same as --ids with the prompt's tokens.
    std::vector<uint32_t> prompt = tok.encode("The capital of France is", SpecialTokens::text);
    std::string list;
    for (uint32_t id : prompt) {
        if (!list.empty()) list += ',';
        list += std::to_string(id);
    }
    Run c = run_kiln("generate --max-tokens 6 --ignore-eos --print-ids --ids " + list);
    CHECK(c.out == b.out);
}
#endif

TEST_CASE("kiln generate: bad input gives a one-line error and exit 1") {
    auto check = [&](const std::string& args, const std::string& needle) {
        CAPTURE(args);
        Run r = run_kiln(args);
        CHECK(r.rc == 1);
        const std::string& e = r.err;
        CHECK(e.find("kiln: error:") == 0);
        CHECK(e.find(needle) != std::string::npos);
        CHECK(std::count(e.begin(), e.end(), '\n') == 1);
    };
    check("generate --model /nonexistent --preset k3-tiny hi", "either --model or --preset");
    check("generate --preset k3 hi", "too large");
    check("generate --ids 1,99999", "99999");
    check("generate --ids 1,x", "'x'");
    check("generate --temperature -1 hi", "temperature");
    check("generate --top-p 0 hi", "top-p");
    check("generate", "prompt");
    check("generate --model /nonexistent/kiln-model hi", "/nonexistent/kiln-model");
}

TEST_CASE("kiln bench reference --json reports prefill and decode speed") {
    Run r = run_kiln("bench reference --prompt-tokens 16 --decode-tokens 4 --json");
    REQUIRE(r.rc == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["prompt_tokens"] == 16);
    CHECK(j["decode_tokens"] == 4);
    CHECK(j["prefill_tokens_per_second"].get<double>() > 0);
    CHECK(j["decode_tokens_per_second"].get<double>() > 0);
    CHECK(j["state_bytes"].get<size_t>() > 0);
}
