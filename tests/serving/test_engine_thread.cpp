// ServingEngine: the Engine interface the HTTP layer calls, on its own thread over the stamped harness
// executor. Concurrent submits and cancels from client threads, the bounded waiting queue, drain and
// shutdown; every sequence gets exactly one final event and nothing is left in memory.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "serving/engine/serving_engine.hpp"
#include "tests/serving/engine_test_support.hpp"

using namespace kiln::serving;
using kiln::test::make_request;
using kiln::test::Recorder;
using kiln::test::reference_tokens;
using kiln::test::StampedExecutor;

namespace {

StampedExecutor::Config executor_config() {
    StampedExecutor::Config c;
    c.page_size = 16;
    c.eos = {kiln::test::tiny_eos()};
    c.eos_period = 50;
    c.max_position = 2048;
    return c;
}

// A Recorder the client thread can wait on.
class Waiter : public EventSink {
public:
    explicit Waiter(uint32_t n) : rec(n) {}
    void on_event(GenerationEvent&& e) override {
        std::lock_guard lock(mu);
        rec.on_event(std::move(e));
        cv.notify_all();
    }
    bool wait_done(std::chrono::seconds limit = std::chrono::seconds(60)) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, limit, [&] { return rec.done(); });
    }
    std::mutex mu;
    std::condition_variable cv;
    Recorder rec;
};

// Holds every launch until opened.
class GatedExecutor final : public kiln::model::forward::ForwardExecutor {
public:
    explicit GatedExecutor(StampedExecutor& inner) : inner_(inner) {}
    const kiln::model::forward::MemorySpec& memory() const override { return inner_.memory(); }
    void reserve(uint64_t bytes) override { inner_.reserve(bytes); }
    Ticket launch(const kiln::model::forward::ForwardBatch& b) override {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return open_; });
        return inner_.launch(b);
    }
    kiln::model::forward::StepResult wait(Ticket t) override { return inner_.wait(t); }
    void open() {
        std::lock_guard lock(mu_);
        open_ = true;
        cv_.notify_all();
    }

private:
    StampedExecutor& inner_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = false;
};

EngineOptions options() {
    EngineOptions o;
    o.memory_bytes = 4u << 20;
    o.track_interval = 64;
    return o;
}

}  // namespace

TEST_CASE("engine thread: concurrent clients submit and cancel; every sequence ends once") {
    StampedExecutor ex(executor_config());
    std::atomic<int> timings{0};
    ServingEngine engine(ex, kiln::test::tiny_tokenizer(), options(), "k3-tiny",
                         [&](const RequestTiming&) { timings.fetch_add(1); });
    CHECK(engine.ready());
    CHECK(engine.info().model_name == "k3-tiny");
    CHECK(engine.info().max_model_len == 2048);
    struct Sent {
        GenerationRequest req;
        std::shared_ptr<Waiter> sink;
        bool cancelled = false;
    };
    constexpr int clients = 4, per_client = 25;
    std::vector<std::vector<Sent>> sent(clients);
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
        threads.emplace_back([&, c] {
            std::mt19937_64 rng(c + 1);
            std::vector<TokenId> shared = kiln::test::random_tokens(rng, 100);
            for (int i = 0; i < per_client; ++i) {
                Sent s;
                auto prompt = rng() % 2 ? shared : std::vector<TokenId>{};
                const auto tail = kiln::test::random_tokens(rng, 1 + rng() % 150);
                prompt.insert(prompt.end(), tail.begin(), tail.end());
                SamplingParams p;
                p.max_tokens = static_cast<uint32_t>(1 + rng() % 40);
                p.n = 1 + static_cast<uint32_t>(rng() % 2);
                p.seed = static_cast<int64_t>(rng() % 100);
                s.req = make_request(prompt, p);
                s.sink = std::make_shared<Waiter>(p.n);
                const RequestHandle h = engine.submit(s.req, s.sink);
                if (rng() % 5 == 0) {
                    engine.cancel(h);
                    s.cancelled = true;
                }
                if (rng() % 3 == 0) s.sink->wait_done();
                sent[c].push_back(std::move(s));
            }
            for (Sent& s : sent[c]) REQUIRE(s.sink->wait_done());
        });
    for (auto& t : threads) t.join();
    engine.drain();
    CHECK_FALSE(engine.ready());
    CHECK_THROWS_AS(engine.submit(make_request({1, 2, 3}, SamplingParams{}), std::make_shared<Waiter>(1)), Unavailable);
    for (const auto& list : sent)
        for (const Sent& s : list) {
            std::lock_guard lock(s.sink->mu);
            for (uint32_t i = 0; i < s.req.sampling.n; ++i) {
                const auto& q = s.sink->rec.seqs[i];
                CHECK(q.finals == 1);
                CHECK(q.after_final == 0);
                if (*q.finish == FinishReason::abort) CHECK(s.cancelled);
                CHECK(q.tokens == reference_tokens(ex, s.req.prompt, kiln::test::device_seed(s.req.sampling, i),
                                                   q.tokens.size()));
            }
        }
    const EngineStats st = engine.stats();
    CHECK(st.running == 0);
    CHECK(st.waiting == 0);
    CHECK(st.prefix_cache_hits > 0);
    engine.shutdown();
    CHECK(timings.load() == clients * per_client);
    CHECK(ex.violations().empty());
}

TEST_CASE("engine thread: a full waiting queue refuses with Overloaded, and nothing is queued") {
    StampedExecutor ex(executor_config());
    GatedExecutor gate(ex);
    EngineOptions o = options();
    o.max_waiting = 3;
    ServingEngine engine(gate, kiln::test::tiny_tokenizer(), o, "k3-tiny");
    SamplingParams p;
    p.max_tokens = 4;
    std::vector<std::shared_ptr<Waiter>> sinks;
    for (int i = 0; i < 3; ++i) {
        sinks.push_back(std::make_shared<Waiter>(1));
        engine.submit(make_request({1, 2, 3, static_cast<TokenId>(i)}, p), sinks.back());
    }
    auto refused = std::make_shared<Waiter>(1);
    CHECK_THROWS_AS(engine.submit(make_request({9, 9}, p), refused), Overloaded);
    CHECK_THROWS_AS(engine.submit(make_request({}, p), refused), InvalidRequest);
    gate.open();
    for (auto& s : sinks) CHECK(s->wait_done());
    std::lock_guard lock(refused->mu);
    CHECK(refused->rec.seqs[0].finals == 0);
}

TEST_CASE("engine thread: shutdown ends every request with an abort") {
    StampedExecutor ex(executor_config());
    std::vector<std::shared_ptr<Waiter>> sinks;
    {
        ServingEngine engine(ex, kiln::test::tiny_tokenizer(), options(), "k3-tiny");
        SamplingParams p;
        p.max_tokens = 1000;
        p.ignore_eos = true;
        std::mt19937_64 rng(3);
        for (int i = 0; i < 5; ++i) {
            sinks.push_back(std::make_shared<Waiter>(1));
            engine.submit(make_request(kiln::test::random_tokens(rng, 50), p), sinks.back());
        }
        engine.shutdown();
        CHECK_FALSE(engine.ready());
        CHECK_THROWS_AS(engine.submit(make_request({1}, p), std::make_shared<Waiter>(1)), Unavailable);
    }
    for (auto& s : sinks) {
        std::lock_guard lock(s->mu);
        CHECK(s->rec.seqs[0].finals == 1);
        CHECK(*s->rec.seqs[0].finish == FinishReason::abort);
    }
    CHECK(ex.violations().empty());
}
