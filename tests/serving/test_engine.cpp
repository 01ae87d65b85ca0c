// The serving engine (EngineCore over the scheduler) on the position-stamped harness executor, case by
// case: what each request streams, where the prefix cache restores it from (exact repeats, branch
// points, multi-turn, n > 1), cancellation, preemption under memory pressure, failures, options.
// The random, long-running counterpart is test_engine_random.cpp.
#include <doctest/doctest.h>

#include <numeric>

#include "runtime/error.hpp"
#include "tests/serving/engine_test_support.hpp"

using namespace kiln::serving;
using kiln::test::make_request;
using kiln::test::random_tokens;
using kiln::test::reference_tokens;
using kiln::test::Rig;
using kiln::test::StampedExecutor;

namespace {

StampedExecutor::Config executor_config(int32_t page_size) {
    StampedExecutor::Config c;
    c.page_size = page_size;
    c.eos = {kiln::test::tiny_eos()};
    c.max_position = 2048;
    return c;
}

EngineOptions roomy(bool overlap = true, bool unified = false) {
    EngineOptions o;
    o.memory_bytes = 8u << 20;
    o.overlap_schedule = overlap;
    o.enable_unified_memory = unified;
    o.track_interval = 64;
    return o;
}

SamplingParams greedy_len(uint32_t max_tokens) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

size_t last_grid_before(size_t len, size_t grid) { return len == 0 ? 0 : (len - 1) / grid * grid; }

// Runs one request alone to its end.
std::shared_ptr<kiln::test::Recorder> run_one(Rig& rig, const std::vector<TokenId>& prompt, const SamplingParams& p) {
    auto rec = rig.submit(make_request(prompt, p));
    rig.run();
    REQUIRE(rec->done());
    return rec;
}

}  // namespace

TEST_CASE("engine: each token follows its own prefix, the text is its decode, the finish is length") {
    for (int32_t ps : {1, 16, 64})
        for (bool overlap : {true, false})
            for (bool unified : {false, true}) {
                CAPTURE(ps);
                CAPTURE(overlap);
                CAPTURE(unified);
                Rig rig(executor_config(ps), roomy(overlap, unified));
                std::mt19937_64 rng(ps * 7 + overlap * 3 + unified);
                std::vector<std::vector<TokenId>> prompts;
                std::vector<std::shared_ptr<kiln::test::Recorder>> recs;
                for (size_t len : {1, 63, 64, 65, 130, 300}) {
                    prompts.push_back(random_tokens(rng, len));
                    SamplingParams p = greedy_len(static_cast<uint32_t>(5 + len % 17));
                    p.logprobs = 2;
                    recs.push_back(rig.submit(make_request(prompts.back(), p)));
                }
                rig.run();
                for (size_t i = 0; i < recs.size(); ++i) {
                    const auto& s = recs[i]->seqs[0];
                    REQUIRE(s.finals == 1);
                    CHECK(s.after_final == 0);
                    CHECK(*s.finish == FinishReason::length);
                    CHECK(s.tokens == reference_tokens(rig.ex, prompts[i], 0, s.tokens.size()));
                    CHECK(s.tokens.size() == 5 + prompts[i].size() % 17);
                    CHECK(s.text == kiln::test::tiny_tokenizer().decode(s.tokens));
                    CHECK(s.logprobs == s.tokens.size());
                }
                if (overlap) CHECK(rig.ex.counts().feeds > 0);
                else CHECK(rig.ex.counts().feeds == 0);
                CHECK(rig.ex.counts().mixed_steps > 0);
                rig.check_empty();
            }
}

TEST_CASE("engine: an exact repeat of a prompt restores the last checkpoint before its end") {
    for (int32_t ps : {1, 16, 64})
        for (size_t len : {30, 64, 65, 200, 256}) {
            CAPTURE(ps);
            CAPTURE(len);
            Rig rig(executor_config(ps), roomy());
            std::mt19937_64 rng(len);
            const auto prompt = random_tokens(rng, len);
            const auto first = run_one(rig, prompt, greedy_len(4));
            const uint64_t copies = rig.ex.counts().copies;
            const auto second = run_one(rig, prompt, greedy_len(4));
            CHECK(first->seqs[0].cached == 0);
            CHECK(second->seqs[0].cached == last_grid_before(len, 64));
            CHECK(rig.ex.counts().copies == copies + (len > 64 ? 1 : 0));
            CHECK(second->seqs[0].tokens == first->seqs[0].tokens);
            rig.check_empty();
        }
}

TEST_CASE("engine: a prompt that diverges inside a cached prefix leaves a checkpoint at the branch point") {
    for (int32_t ps : {1, 16, 64}) {
        CAPTURE(ps);
        Rig rig(executor_config(ps), roomy());
        std::mt19937_64 rng(ps);
        const auto shared = random_tokens(rng, 150);
        auto with = [&](size_t n) {
            auto t = shared;
            const auto tail = random_tokens(rng, n);
            t.insert(t.end(), tail.begin(), tail.end());
            return t;
        };
        const auto a = run_one(rig, with(100), greedy_len(3));
        const auto b = run_one(rig, with(100), greedy_len(3));  // KV matches 150 tokens, no checkpoint below
        const auto c = run_one(rig, with(50), greedy_len(3));   // restores at the branch point
        CHECK(a->seqs[0].cached == 0);
        CHECK(b->seqs[0].cached == 0);
        CHECK(c->seqs[0].cached == 128);
        rig.check_empty();
    }
}

TEST_CASE("engine: the next turn of a conversation restores the last decode checkpoint") {
    for (int32_t ps : {1, 16}) {
        CAPTURE(ps);
        Rig rig(executor_config(ps), roomy());
        std::mt19937_64 rng(11);
        auto prompt = random_tokens(rng, 100);
        const auto t1 = run_one(rig, prompt, greedy_len(100));
        prompt.insert(prompt.end(), t1->seqs[0].tokens.begin(), t1->seqs[0].tokens.end());
        const auto more = random_tokens(rng, 40);
        prompt.insert(prompt.end(), more.begin(), more.end());
        const auto t2 = run_one(rig, prompt, greedy_len(10));
        // Positions computed in turn 1: [0, 199); decode checkpoints every 64: at 128 and 192.
        CHECK(t2->seqs[0].cached == 192);
        CHECK(t2->seqs[0].tokens == reference_tokens(rig.ex, prompt, 0, 10));
        rig.check_empty();
    }
}

TEST_CASE("engine: n > 1 sequences share the prompt through the prefix cache") {
    for (bool cache : {true, false}) {
        CAPTURE(cache);
        EngineOptions o = roomy();
        o.enable_prefix_cache = cache;
        Rig rig(executor_config(16), o);
        std::mt19937_64 rng(5);
        const auto prompt = random_tokens(rng, 200);
        SamplingParams p;
        p.n = 3;
        p.seed = 7;
        p.max_tokens = 12;
        p.ignore_eos = true;
        const auto rec = run_one(rig, prompt, p);
        for (uint32_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            const auto& s = rec->seqs[i];
            CHECK(s.finals == 1);
            CHECK(s.tokens == reference_tokens(rig.ex, prompt, 7 + i, 12));
            CHECK(s.cached == (cache && i > 0 ? 192u : 0u));
        }
        CHECK(rec->seqs[0].tokens != rec->seqs[1].tokens);
        rig.check_empty();
    }
}

TEST_CASE("engine: stop conditions end a sequence early and free it") {
    Rig rig(executor_config(16), roomy());
    std::mt19937_64 rng(3);
    const auto prompt = random_tokens(rng, 80);
    const auto ref = reference_tokens(rig.ex, prompt, 0, 40);
    SamplingParams p = greedy_len(40);
    p.stop_token_ids = {ref[9]};
    p.min_tokens = 3;
    const auto rec = run_one(rig, prompt, p);
    const auto& s = rec->seqs[0];
    const size_t first = static_cast<size_t>(std::find(ref.begin() + 2, ref.end(), ref[9]) - ref.begin());
    CHECK(s.tokens.size() == first + 1);
    CHECK(*s.finish == FinishReason::stop);
    CHECK(s.stop_token == ref[9]);
    rig.check_empty();
}

TEST_CASE("engine: cancel ends a request at once and frees its memory") {
    for (bool overlap : {true, false}) {
        CAPTURE(overlap);
        Rig rig(executor_config(16), roomy(overlap));
        std::mt19937_64 rng(9);
        std::vector<std::shared_ptr<kiln::test::Recorder>> recs;
        std::vector<RequestHandle> handles(3);
        for (size_t i = 0; i < 3; ++i) {
            SamplingParams p = greedy_len(200);
            p.n = i == 1 ? 2 : 1;
            p.seed = 1;
            recs.push_back(rig.submit(make_request(random_tokens(rng, 300), p), &handles[i]));
        }
        for (int k = 0; k < 8; ++k) rig.step();
        rig.core.cancel(handles[1]);
        rig.core.check_invariants();
        for (const auto& s : recs[1]->seqs) {
            CHECK(s.finals == 1);
            CHECK(*s.finish == FinishReason::abort);
        }
        rig.core.cancel(handles[1]);  // idempotent
        rig.core.cancel(999);         // unknown
        rig.run();
        for (const auto& r : recs)
            for (const auto& s : r->seqs) {
                CHECK(s.finals == 1);
                CHECK(s.after_final == 0);
            }
        CHECK(*recs[0]->seqs[0].finish == FinishReason::length);
        CHECK(*recs[2]->seqs[0].finish == FinishReason::length);
        rig.check_empty();
    }
}

TEST_CASE("engine: under memory pressure requests are preempted and recomputed, none is lost") {
    for (bool unified : {false, true})
        for (bool overlap : {true, false}) {
            CAPTURE(unified);
            CAPTURE(overlap);
            StampedExecutor::Config c = executor_config(16);
            EngineOptions o = roomy(overlap, unified);
            // Six state slots and 400 tokens of KV (split): one or two sequences at a time.
            o.memory_bytes = 6 * c.slot_bytes + 400 * c.token_bytes;
            o.state_memory_fraction = 6.0 * c.slot_bytes / static_cast<double>(o.memory_bytes) + 1e-9;
            o.max_batch_tokens = 96;
            Rig rig(c, o);
            std::mt19937_64 rng(17);
            std::vector<std::vector<TokenId>> prompts;
            std::vector<std::shared_ptr<kiln::test::Recorder>> recs;
            for (int i = 0; i < 10; ++i) {
                prompts.push_back(random_tokens(rng, 60 + rng() % 90));
                recs.push_back(rig.submit(make_request(prompts.back(), greedy_len(140 + i))));
            }
            rig.run();
            for (size_t i = 0; i < recs.size(); ++i) {
                const auto& s = recs[i]->seqs[0];
                REQUIRE(s.finals == 1);
                CHECK(*s.finish == FinishReason::length);
                CHECK(s.tokens == reference_tokens(rig.ex, prompts[i], 0, 140 + i));
            }
            CHECK(rig.core.stats().preemptions > 0);
            if (unified) CHECK(rig.core.counters().moves > 0);
            rig.check_empty();
        }
}

TEST_CASE("engine: a non-finite result fails its request only") {
    StampedExecutor::Config c = executor_config(16);
    c.poison = 4095;
    Rig rig(c, roomy());
    std::mt19937_64 rng(2);
    auto bad = random_tokens(rng, 70);
    bad.push_back(4095);
    const auto good = random_tokens(rng, 70);
    auto r1 = rig.submit(make_request(bad, greedy_len(5)));
    auto r2 = rig.submit(make_request(good, greedy_len(5)));
    rig.run();
    CHECK(*r1->seqs[0].finish == FinishReason::error);
    CHECK(r1->seqs[0].tokens.empty());
    CHECK(*r2->seqs[0].finish == FinishReason::length);
    CHECK(r2->seqs[0].tokens == reference_tokens(rig.ex, good, 0, 5));
    CHECK_FALSE(rig.core.failed());
    rig.check_empty();
}

TEST_CASE("engine: without --max-model-len the context is capped to what the KV pages hold") {
    StampedExecutor::Config c = executor_config(16);
    EngineOptions o = roomy();
    o.memory_bytes = 4 * c.slot_bytes + 256 * c.token_bytes;
    o.state_memory_fraction = 4.0 * c.slot_bytes / static_cast<double>(o.memory_bytes) + 1e-9;
    Rig rig(c, o);
    CHECK(rig.core.max_model_len() == 256);
}

TEST_CASE("engine: requests that can never run are refused, naming the field") {
    StampedExecutor::Config c = executor_config(16);
    EngineOptions o = roomy();
    o.memory_bytes = 4 * c.slot_bytes + 256 * c.token_bytes;
    o.state_memory_fraction = 4.0 * c.slot_bytes / static_cast<double>(o.memory_bytes) + 1e-9;
    o.max_model_len = static_cast<uint32_t>(c.max_position);  // the context, not what the memory holds
    Rig rig(c, o);
    const auto param_of = [&](const GenerationRequest& r) {
        try {
            rig.core.check_request(r);
        } catch (const InvalidRequest& e) {
            return e.param();
        }
        return std::string("accepted");
    };
    CHECK(param_of(make_request({}, greedy_len(4))) == "prompt");
    CHECK(param_of(make_request(std::vector<TokenId>(2048, 1), greedy_len(4))) == "prompt");
    CHECK(param_of(make_request(std::vector<TokenId>(2000, 1), greedy_len(100))) == "max_tokens");
    CHECK(param_of(make_request({1, 2, 5000}, greedy_len(4))) == "prompt");
    CHECK(param_of(make_request(std::vector<TokenId>(200, 1), greedy_len(100))) == "prompt");  // > 256 tokens of KV
    CHECK(param_of(make_request(std::vector<TokenId>(200, 1), greedy_len(40))) == "accepted");
}

TEST_CASE("engine: options are checked against the executor, naming the flag") {
    StampedExecutor ex(executor_config(16));
    const auto flag_of = [&](EngineOptions o) {
        try {
            resolve_options(o, ex.memory());
        } catch (const kiln::InvalidArgument& e) {
            return std::string(e.what()).substr(0, std::string(e.what()).find(':'));
        }
        return std::string("accepted");
    };
    EngineOptions o;
    CHECK(flag_of(o) == "accepted");
    o.page_size = 64;
    CHECK(flag_of(o) == "--page-size");
    o = {};
    o.max_running = 0;
    CHECK(flag_of(o) == "--max-running");
    o = {};
    o.state_memory_fraction = 1.0;
    CHECK(flag_of(o) == "--state-memory-fraction");
    o = {};
    o.max_model_len = 5000;
    CHECK(flag_of(o) == "--max-model-len");
    o = {};
    o.max_batch_tokens = 0;
    CHECK(flag_of(o) == "--max-batch-tokens");
    o = {};
    o.max_batch_tokens = 8;
    o.track_interval = 100;
    const ResolvedOptions r = resolve_options(o, ex.memory());
    CHECK(r.max_running == 8);
    CHECK(r.track_interval == 128);
    CHECK(r.grid == 64);
    o = {};
    o.memory_bytes = 1000;
    CHECK_THROWS_AS(EngineCore(ex, kiln::test::tiny_tokenizer(), o), kiln::InvalidArgument);
}

TEST_CASE("engine: stats and per-request timing") {
    std::vector<RequestTiming> timings;
    Rig rig(executor_config(16), roomy(), [&](const RequestTiming& t) { timings.push_back(t); });
    std::mt19937_64 rng(4);
    const auto prompt = random_tokens(rng, 130);
    SamplingParams p = greedy_len(9);
    p.n = 2;
    p.seed = 3;
    rig.submit(make_request(prompt, p));
    rig.submit(make_request(prompt, greedy_len(5)));
    EngineStats s = rig.core.stats();
    CHECK(s.waiting == 3);
    CHECK(s.running == 0);
    rig.step();
    s = rig.core.stats();
    CHECK(s.running >= 1);
    CHECK(s.kv_usage > 0.0);
    CHECK(s.state_usage > 0.0);
    rig.run();
    s = rig.core.stats();
    CHECK(s.running == 0);
    CHECK(s.waiting == 0);
    CHECK(s.prefix_cache_queries >= 3 * 130);
    CHECK(s.prefix_cache_hits == 128);  // the sibling; the second request was admitted beside the first
    REQUIRE(timings.size() == 2);
    const RequestTiming& t = timings[0].sequences == 2 ? timings[0] : timings[1];
    CHECK(t.output_tokens == 18);
    CHECK(t.inter_token_seconds.size() == 16);
    CHECK(t.has_token());
    CHECK(t.ttft_seconds() >= t.queue_seconds());
    CHECK(t.e2e_seconds() >= t.ttft_seconds());
    CHECK(t.cached_tokens == 128);
    const EngineCounters c = rig.core.counters();
    CHECK(c.scheduler.checkpoints_donated > 0);
    CHECK(c.scheduler.restores == 1);
    CHECK(c.steps == rig.ex.counts().steps);
    rig.check_empty();
}

TEST_CASE("engine: compaction moves made while nothing runs reach the next step") {
    for (bool overlap : {true, false}) {
        CAPTURE(overlap);
        Rig rig(executor_config(16), roomy(overlap, true));
        std::mt19937_64 rng(8);
        const auto a = random_tokens(rng, 83);
        RequestHandle h = 0;
        rig.submit(make_request(a, greedy_len(40)), &h);
        for (int k = 0; k < 3; ++k) rig.step();
        rig.core.cancel(h);  // frees its working slot under its donated checkpoint: a pending move
        CHECK(rig.core.scheduler().memory().moves_pending());
        rig.run();           // steps with nothing to launch
        auto prefix = a;
        prefix.resize(70);
        const auto rec = run_one(rig, prefix, greedy_len(3));  // restores the moved checkpoint
        CHECK(rec->seqs[0].cached == 64);
        CHECK(rec->seqs[0].tokens == reference_tokens(rig.ex, prefix, 0, 3));
        CHECK(rig.core.counters().moves > 0);
        rig.check_empty();
    }
}
