// The engine over the position-stamped harness executor, driven at random: requests arrive while steps
// run (fresh prompts, exact repeats, next turns of earlier conversations, branches off them; n of 1 to
// 3; stop strings, stop ids, min_tokens, EOS, logprobs, penalties), some are cancelled, memory is tight
// enough that the prefix cache evicts and running sequences are preempted. The harness checks every
// step's state and KV; the scheduler's and the tree's invariants are checked after every step. At the
// end every sequence has ended exactly once, every token is the one its own prefix yields, the outputs
// equal a run of the same requests without the prefix cache, and the pools are empty.
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/serving/engine_test_support.hpp"

using namespace kiln::serving;
using kiln::test::device_seed;
using kiln::test::make_request;
using kiln::test::Recorder;
using kiln::test::reference_tokens;
using kiln::test::Rig;
using kiln::test::StampedExecutor;

namespace {

struct Setup {
    int32_t page_size = 16;
    bool unified = false;
    bool overlap = true;
    uint32_t cap = 0;
    uint64_t seed = 1;
    size_t steps = 700;
};

struct Totals {
    uint64_t requests = 0, cancelled = 0, preemptions = 0, restores = 0, hits = 0, feeds = 0, moves = 0;
    uint64_t skipped_snapshots = 0, stops = 0, stop_strings = 0, identity_checks = 0, donated = 0, evicted = 0;
    uint64_t pruned = 0, duplicate_pages = 0;
};

constexpr uint32_t token_range = 512;  // small enough for stop ids and stop strings to fire

StampedExecutor::Config executor_config(int32_t page_size) {
    StampedExecutor::Config c;
    c.page_size = page_size;
    c.eos = {kiln::test::tiny_eos()};
    c.eos_period = 60;
    c.token_range = token_range;
    c.max_position = 2048;
    c.max_tokens = 512;
    return c;
}

class Fuzz {
public:
    Fuzz(const Setup& s, Totals& totals) : s_(s), totals_(totals), rng_(s.seed), rig_(executor_config(s.page_size), options()) {}

    void run() {
        for (size_t step = 0; step < s_.steps; ++step) {
            for (int k = 0; k < 3 && live_.size() < 12 && unit() < 0.35; ++k) submit();
            if (!live_.empty() && unit() < 0.015) cancel(live_[below(live_.size())]);
            rig_.step();
            reap();
        }
        rig_.run();
        reap();
        REQUIRE(live_.empty());
        check_outputs();
        totals_.requests += all_.size();
        const EngineCounters c = rig_.core.counters();
        totals_.preemptions += c.scheduler.preemptions;
        totals_.restores += c.scheduler.restores;
        totals_.skipped_snapshots += c.scheduler.snapshots_skipped;
        totals_.donated += c.scheduler.checkpoints_donated;
        totals_.evicted += c.prefix_cache.evicted_checkpoints + c.prefix_cache.evicted_pages;
        totals_.moves += c.moves;
        totals_.pruned += c.prefix_cache.pruned_checkpoints;
        totals_.duplicate_pages += c.prefix_cache.duplicate_pages;
        totals_.feeds += rig_.ex.counts().feeds;
        totals_.identity_checks += rig_.ex.counts().identity_checks;
        rig_.check_empty();
        compare_with_uncached();
    }

private:
    struct Submitted {
        RequestHandle handle = 0;
        GenerationRequest req;
        std::shared_ptr<Recorder> rec;
        bool cancelled = false;
    };

    EngineOptions options() {
        const StampedExecutor::Config c = executor_config(s_.page_size);
        EngineOptions o;
        o.memory_bytes = 14 * c.slot_bytes + 600 * c.token_bytes;
        o.state_memory_fraction = 14.0 * c.slot_bytes / static_cast<double>(o.memory_bytes) + 1e-9;
        o.enable_unified_memory = s_.unified;
        o.overlap_schedule = s_.overlap;
        o.max_checkpoints_per_path = s_.cap;
        const uint32_t budgets[] = {32, 64, 100, 256};
        const uint32_t chunks[] = {0, 0, 48, 130};
        const uint32_t running[] = {3, 8, 16};
        std::mt19937_64 r(s_.seed * 31 + 7);
        o.max_batch_tokens = budgets[r() % 4];
        o.prefill_chunk = chunks[r() % 4];
        o.max_running = running[r() % 3];
        o.track_interval = r() % 2 ? 64 : 128;
        o.max_waiting = 1000;
        return o;
    }

    double unit() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
    size_t below(size_t n) { return n == 0 ? 0 : rng_() % n; }
    std::vector<TokenId> tokens(size_t n) { return kiln::test::random_tokens(rng_, n, token_range); }

    std::vector<TokenId> prompt() {
        const double r = unit();
        std::vector<TokenId> t;
        if (!prompts_.empty() && r < 0.2) {
            t = prompts_[below(prompts_.size())];  // an exact repeat
        } else if (!history_.empty() && r < 0.5) {
            t = history_[below(history_.size())];  // the next turn of a conversation
            const auto more = tokens(1 + below(60));
            t.insert(t.end(), more.begin(), more.end());
        } else if (!history_.empty() && r < 0.7) {
            const auto& h = history_[below(history_.size())];  // a branch off one
            t.assign(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(1 + below(h.size())));
            const auto more = tokens(1 + below(60));
            t.insert(t.end(), more.begin(), more.end());
        } else {
            t = tokens(1 + below(260));
        }
        if (t.size() > 320) t.resize(320);
        return t;
    }

    SamplingParams sampling() {
        SamplingParams p;
        p.max_tokens = static_cast<uint32_t>(1 + below(unit() < 0.3 ? 120 : 40));
        const double n = unit();
        p.n = n < 0.75 ? 1 : n < 0.9 ? 2 : 3;
        if (p.n > 1 || unit() < 0.5) p.seed = static_cast<int64_t>(rng_() % 1000);
        if (unit() < 0.5) p.repetition_penalty = 1.1f;  // the step then carries the prompt: identity checked
        if (unit() < 0.2) p.ignore_eos = true;
        if (unit() < 0.2) p.min_tokens = static_cast<uint32_t>(below(p.max_tokens + 1));
        if (unit() < 0.25) {
            const char* stops[] = {"e", "th", "in", " a", "ion", "\n"};
            for (size_t k = 1 + below(2); k; --k) p.stop.push_back(stops[below(6)]);
        }
        if (unit() < 0.2)
            for (size_t k = 1 + below(20); k; --k) p.stop_token_ids.push_back(static_cast<TokenId>(below(token_range)));
        if (unit() < 0.2) p.include_stop_str_in_output = true;
        if (unit() < 0.2) p.logprobs = static_cast<uint32_t>(below(3));
        if (unit() < 0.2) p.skip_special_tokens = false;
        return p;
    }

    void submit() {
        Submitted s;
        s.req = make_request(prompt(), sampling());
        s.req.id = std::to_string(all_.size());
        s.rec = rig_.submit(s.req, &s.handle);
        prompts_.push_back(s.req.prompt);
        if (prompts_.size() > 30) prompts_.erase(prompts_.begin());
        live_.push_back(all_.size());
        all_.push_back(std::move(s));
    }

    void cancel(size_t i) {
        all_[i].cancelled = true;
        rig_.core.cancel(all_[i].handle);
        rig_.core.check_invariants();
    }

    void reap() {
        for (size_t k = 0; k < live_.size();) {
            Submitted& s = all_[live_[k]];
            if (!s.rec->done()) {
                ++k;
                continue;
            }
            if (!s.cancelled) {
                auto h = s.req.prompt;
                h.insert(h.end(), s.rec->seqs[0].tokens.begin(), s.rec->seqs[0].tokens.end());
                history_.push_back(std::move(h));
                if (history_.size() > 30) history_.erase(history_.begin());
            }
            live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(k));
        }
    }

    void check_outputs() {
        for (const Submitted& s : all_) {
            CAPTURE(s.req.id);
            CHECK(s.rec->bad_index == 0);
            for (uint32_t i = 0; i < s.req.sampling.n; ++i) {
                CAPTURE(i);
                const kiln::test::SequenceRecord& q = s.rec->seqs[i];
                REQUIRE(q.finals == 1);
                CHECK(q.after_final == 0);
                REQUIRE(q.finish);
                CHECK(q.tokens == reference_tokens(rig_.ex, s.req.prompt, device_seed(s.req.sampling, i), q.tokens.size()));
                CHECK(q.tokens.size() <= s.req.sampling.max_tokens);
                if (q.logprobs) CHECK(q.logprobs == q.tokens.size());
                if (*q.finish == FinishReason::abort) CHECK(s.cancelled);
                if (*q.finish == FinishReason::length) CHECK(q.tokens.size() == s.req.sampling.max_tokens);
                if (*q.finish == FinishReason::stop) {
                    CHECK(q.tokens.size() >= s.req.sampling.min_tokens);
                    CHECK((q.stop_string.has_value() != q.stop_token.has_value()));
                    if (q.stop_token) CHECK(q.tokens.back() == *q.stop_token);
                    ++totals_.stops;
                    totals_.stop_strings += q.stop_string.has_value();
                }
                CHECK(q.error.empty() == (*q.finish != FinishReason::abort && *q.finish != FinishReason::error));
                totals_.hits += q.cached > 0;
            }
            totals_.cancelled += s.cancelled;
        }
    }

    // The same requests (all but the cancelled ones) on an engine without a prefix cache and with room
    // for everything: the same streams, text and finishes.
    void compare_with_uncached() {
        EngineOptions o;
        o.enable_prefix_cache = false;
        o.memory_bytes = 64u << 20;
        o.overlap_schedule = !s_.overlap;
        Rig ref(executor_config(s_.page_size), o);
        std::vector<std::shared_ptr<Recorder>> recs(all_.size());
        for (size_t i = 0; i < all_.size(); ++i)
            if (!all_[i].cancelled) recs[i] = ref.submit(all_[i].req);
        ref.run();
        for (size_t i = 0; i < all_.size(); ++i) {
            if (!recs[i]) continue;
            CAPTURE(i);
            for (uint32_t k = 0; k < all_[i].req.sampling.n; ++k) {
                const auto& a = all_[i].rec->seqs[k];
                const auto& b = recs[i]->seqs[k];
                CHECK(a.tokens == b.tokens);
                CHECK(a.text == b.text);
                CHECK(a.finish == b.finish);
                CHECK(a.stop_string == b.stop_string);
                CHECK(a.stop_token == b.stop_token);
            }
        }
        ref.check_empty();
    }

    Setup s_;
    Totals& totals_;
    std::mt19937_64 rng_;
    Rig rig_;
    std::vector<Submitted> all_;
    std::vector<size_t> live_;
    std::vector<std::vector<TokenId>> prompts_;
    std::vector<std::vector<TokenId>> history_;
};

}  // namespace

TEST_CASE("engine random: cached runs equal uncached ones; nothing is lost or leaked") {
    Totals t;
    uint64_t seed = 1;
    for (int32_t ps : {1, 16, 64})
        for (bool unified : {false, true}) {
            Setup s;
            s.page_size = ps;
            s.unified = unified;
            s.overlap = true;
            s.cap = seed % 2 ? 0 : 2;
            s.seed = seed++;
            CAPTURE(ps);
            CAPTURE(unified);
            CAPTURE(s.seed);
            Fuzz(s, t).run();
        }
    for (int32_t ps : {1, 16, 64}) {
        Setup s;
        s.page_size = ps;
        s.unified = ps == 16;
        s.overlap = false;
        s.seed = seed++;
        CAPTURE(ps);
        CAPTURE(s.seed);
        Fuzz(s, t).run();
    }
    MESSAGE("requests " << t.requests << ", cancelled " << t.cancelled << ", preemptions " << t.preemptions
                        << ", restores " << t.restores << ", sequences with a hit " << t.hits << ", checkpoints donated "
                        << t.donated << ", evicted " << t.evicted << ", snapshots skipped " << t.skipped_snapshots
                        << ", fed decodes " << t.feeds << ", moves " << t.moves << ", stops " << t.stops
                        << " (strings " << t.stop_strings << "), identity checks " << t.identity_checks
                        << ", checkpoints pruned by the cap " << t.pruned << ", duplicate pages " << t.duplicate_pages);
    CHECK(t.requests > 600);
    CHECK(t.cancelled > 20);
    CHECK(t.preemptions > 20);
    CHECK(t.restores > 200);
    CHECK(t.evicted > 100);
    CHECK(t.feeds > 1000);
    CHECK(t.moves > 100);
    CHECK(t.stop_strings > 20);
    CHECK(t.stops > 100);
    CHECK(t.identity_checks > 1000);
    CHECK(t.pruned > 10);
    CHECK(t.duplicate_pages > 100);
}
