// The reference executor over the arena against the reference model run directly: the state it stores in
// slots and pages (bf16 conv state and latents, fp32 recurrent state) carries a sequence across steps, chunk
// by chunk, to the same logits; snapshots resume to the same place; bad batches change nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model/forward/reference_executor.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "model/reference/token_sampler.hpp"
#include "runtime/error.hpp"
#include "tests/common/sandbox.hpp"

using namespace kiln::model;
using namespace kiln::model::forward;
using kiln::InvalidArgument;

namespace {

std::unique_ptr<reference::ReferenceModel> tiny() {
    kiln::test::TempDir dir("model");
    const ModelConfig c = k3_tiny_config();
    write_model(c, dir.path, MakeModelOptions{});
    Checkpoint ck = Checkpoint::open(dir.path);
    return std::make_unique<reference::ReferenceModel>(c, ck);
}

const reference::ReferenceModel& model() {
    static std::unique_ptr<reference::ReferenceModel> m = tiny();
    return *m;
}

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(g() % uint64_t(vocab));
    return t;
}

// The reference's log-softmax of the last position after `ids`.
std::vector<double> reference_logprobs(std::span<const int32_t> ids) {
    reference::RequestState st = model().new_request();
    std::vector<uint32_t> u(ids.begin(), ids.end());
    reference::Matrix l = model().forward(st, u);
    auto row = l.row_span(l.rows - 1);
    double m = *std::max_element(row.begin(), row.end()), s = 0;
    for (float x : row) s += std::exp(double(x) - m);
    std::vector<double> lp;
    for (float x : row) lp.push_back(double(x) - m - std::log(s));
    return lp;
}

Sampling greedy_logprobs() {
    Sampling s;
    s.want_logprobs = true;
    s.logprobs = 4;
    return s;
}

// Runs `tokens` through the executor in steps of `chunk` tokens on slot 0 and pages 0.., sampling greedily at
// the end of every step; snapshots at every multiple of 64 go to slots 1, 2, ...
std::vector<SequenceResult> run_chunks(ReferenceExecutor& x, const std::vector<int32_t>& tokens, int chunk, int page_size,
                                       std::vector<int32_t>* snap_positions = nullptr) {
    std::vector<SequenceResult> out;
    std::vector<int32_t> pages;
    for (int32_t p = 0; p < int32_t(tokens.size() + page_size - 1) / page_size; ++p) pages.push_back(p);
    int32_t next_snap_slot = 1;
    for (size_t at = 0; at < tokens.size(); at += size_t(chunk)) {
        const size_t end = std::min(tokens.size(), at + size_t(chunk));
        ForwardBatch b;
        SequenceStep q;
        q.tokens.assign(tokens.begin() + at, tokens.begin() + end);
        q.start = int32_t(at);
        q.slot = 0;
        q.fresh_state = at == 0;
        q.pages.assign(pages.begin(), pages.begin() + (end + page_size - 1) / page_size);
        for (int32_t p = (int32_t(at) / 64 + 1) * 64; p <= int32_t(end); p += 64) {
            q.snapshots.push_back({p, next_snap_slot++});
            if (snap_positions) snap_positions->push_back(p);
        }
        q.sample = true;
        q.sampling = greedy_logprobs();
        b.seqs.push_back(q);
        out.push_back(x.wait(x.launch(b)).seqs.at(0));
    }
    return out;
}

// The arena stores the conv state (the last three projected inputs) and the latents in bf16 while the
// reference keeps them in fp32. Rounding the conv state where a step resumes moves the random-weight tiny
// model's logprobs by up to about 0.15 nats a hundred positions later; a misplaced byte moves them by nats.
constexpr double kLogprobTol = 0.25;

void check_against_reference(const SequenceResult& r, std::span<const int32_t> prefix) {
    const std::vector<double> lp = reference_logprobs(prefix);
    REQUIRE(r.token >= 0);
    CHECK(!r.nonfinite);
    CHECK(std::abs(double(r.chosen.logprob) - lp[size_t(r.token)]) < kLogprobTol);
    std::vector<double> sorted = lp;
    std::sort(sorted.rbegin(), sorted.rend());
    // Greedy picks the reference's argmax wherever its margin exceeds what the rounding can move.
    if (sorted[0] - sorted[1] > 2 * kLogprobTol)
        CHECK(r.token == int32_t(std::max_element(lp.begin(), lp.end()) - lp.begin()));
    REQUIRE(r.top.size() == 4);
    CHECK(r.top[0].logprob >= r.top[1].logprob);
}

}  // namespace

TEST_CASE("reference executor: a prompt in chunks over the arena gives the reference's logprobs (page sizes 1, 16, 64)") {
    const int32_t V = int32_t(model().vocab_size());
    const std::vector<int32_t> tokens = random_tokens(150, V, 7);
    for (int page_size : {1, 16, 64}) {
        CAPTURE(page_size);
        ReferenceExecutor x(model(), {page_size, 256, 8, 1});
        x.reserve(x.memory().slot_bytes * 8 + x.memory().page_bytes * (200 / page_size + 2));
        for (int chunk : {150, 70, 1 + 63 * (page_size == 1)}) {
            CAPTURE(chunk);
            std::vector<SequenceResult> rs = run_chunks(x, tokens, chunk, page_size);
            // The last step's token and logprobs follow the reference run over the whole prompt.
            check_against_reference(rs.back(), tokens);
            if (rs.size() > 1) {
                const size_t first_end = std::min<size_t>(tokens.size(), size_t(chunk));
                check_against_reference(rs.front(), std::span(tokens).first(first_end));
            }
        }
    }
}

TEST_CASE("reference executor: a snapshot restored into another slot resumes where it was taken") {
    const int32_t V = int32_t(model().vocab_size());
    const std::vector<int32_t> tokens = random_tokens(140, V, 11);
    ReferenceExecutor x(model(), {16, 256, 8, 1});
    x.reserve(x.memory().slot_bytes * 8 + x.memory().page_bytes * 32);
    std::vector<int32_t> snaps;
    std::vector<SequenceResult> whole = run_chunks(x, tokens, 140, 16, &snaps);
    REQUIRE(snaps == std::vector<int32_t>{64, 128});
    // Slot 2 holds the state after 128 tokens; pages 0..7 the KV of [0, 128). Continue in slot 5 with new
    // pages for positions >= 128.
    ForwardBatch b;
    b.copies.push_back({2, 5});
    SequenceStep q;
    q.tokens.assign(tokens.begin() + 128, tokens.end());
    q.start = 128;
    q.slot = 5;
    q.pages = {0, 1, 2, 3, 4, 5, 6, 7, 20};
    q.sample = true;
    q.sampling = greedy_logprobs();
    b.seqs.push_back(q);
    SequenceResult r = x.wait(x.launch(b)).seqs.at(0);
    CHECK(r.token == whole.back().token);
    CHECK(std::abs(r.chosen.logprob - whole.back().chosen.logprob) < 1e-4);
}

TEST_CASE("reference executor: two sequences in one step compute what each computes alone; feed_from decodes") {
    const int32_t V = int32_t(model().vocab_size());
    const std::vector<int32_t> a = random_tokens(40, V, 1), c = random_tokens(9, V, 2);
    ReferenceExecutor x(model(), {16, 256, 8, 1});
    x.reserve(x.memory().slot_bytes * 8 + x.memory().page_bytes * 16);
    ForwardBatch b;
    auto seq = [&](const std::vector<int32_t>& t, int32_t slot, std::vector<int32_t> pages) {
        SequenceStep q;
        q.tokens = t;
        q.slot = slot;
        q.fresh_state = true;
        q.pages = std::move(pages);
        q.sample = true;
        q.sampling = greedy_logprobs();
        return q;
    };
    b.seqs = {seq(a, 3, {4, 5, 6}), seq(c, 1, {9})};
    StepResult r = x.wait(x.launch(b));
    check_against_reference(r.seqs[0], a);
    check_against_reference(r.seqs[1], c);
    // The next step decodes both, each fed the token it sampled.
    ForwardBatch d;
    SequenceStep q0 = seq({-1}, 3, {4, 5, 6}), q1 = seq({-1}, 1, {9});
    q0.fresh_state = q1.fresh_state = false;
    q0.start = 40;
    q1.start = 9;
    q0.feed_from = 0;
    q1.feed_from = 1;
    d.seqs = {q1, q0};
    StepResult r2 = x.wait(x.launch(d));
    std::vector<int32_t> a2 = a, c2 = c;
    a2.push_back(r.seqs[0].token);
    c2.push_back(r.seqs[1].token);
    check_against_reference(r2.seqs[0], c2);
    check_against_reference(r2.seqs[1], a2);
}

TEST_CASE("reference executor: a malformed batch is refused before anything changes") {
    ReferenceExecutor x(model(), {16, 64, 4, 1});
    const uint64_t slots = 4, pages = 8;
    x.reserve(x.memory().slot_bytes * slots + x.memory().page_bytes * pages);
    const int32_t V = int32_t(model().vocab_size());
    auto base = [&] {
        ForwardBatch b;
        SequenceStep q;
        q.tokens = random_tokens(20, V, 3);
        q.slot = 0;
        q.fresh_state = true;
        q.pages = {0, 1};
        q.sample = true;
        b.seqs.push_back(q);
        return b;
    };
    const int32_t before = x.wait(x.launch(base())).seqs[0].token;
    std::vector<ForwardBatch> bad(7, base());
    bad[0].seqs[0].slot = 1 << 20;
    bad[1].seqs[0].pages = {0};                     // fewer pages than positions
    bad[2].seqs[0].tokens[3] = V;                   // outside the vocabulary
    bad[3].seqs[0].snapshots.push_back({10, 1});    // not a chunk multiple
    bad[4].seqs.push_back(bad[4].seqs[0]);          // two sequences on one slot
    bad[5].copies.push_back({0, 99});
    bad[6].seqs[0].tokens.assign(100, 1);           // more tokens than the plan's 64
    for (size_t i = 0; i < bad.size(); ++i) {
        CAPTURE(i);
        CHECK_THROWS_AS(x.launch(bad[i]), InvalidArgument);
    }
    CHECK(x.wait(x.launch(base())).seqs[0].token == before);
}

TEST_CASE("token sampler: seeded draws repeat, penalties and truncation apply, logprobs are of the raw logits") {
    std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f, 3.0f, 0.0f};
    Sampling s;
    s.temperature = 0.8f;
    s.seeded = true;
    s.seed = 42;
    const auto a = reference::sample_token(logits, s, {}, std::vector<int32_t>{1, 2}, 0.5);
    const auto b = reference::sample_token(logits, s, {}, std::vector<int32_t>{3, 0}, 0.9);
    CHECK(a.token == b.token);  // same seed and step (2 tokens out), the draw ignores u
    Sampling g;
    CHECK(reference::sample_token(logits, g, {}, {}, 0.3).token == 4);
    g.frequency_penalty = 2.0f;  // token 4 generated once: 3 - 2 = 1 < 2
    CHECK(reference::sample_token(logits, g, {}, std::vector<int32_t>{4}, 0.3).token == 0);
    Sampling k;
    k.temperature = 1.0f;
    k.top_k = 1;
    for (double u : {0.0, 0.5, 0.999}) CHECK(reference::sample_token(logits, k, {}, {}, u).token == 4);
    Sampling lp;
    lp.want_logprobs = true;
    lp.logprobs = 2;
    lp.repetition_penalty = 5.0f;  // changes the choice, not the reported logprobs
    const auto r = reference::sample_token(logits, lp, std::vector<int32_t>{4}, {}, 0.1);
    CHECK(r.token == 0);
    double m = 3, sum = 0;
    for (float x : logits) sum += std::exp(x - m);
    CHECK(r.chosen.logprob == doctest::Approx(2.0 - m - std::log(sum)).epsilon(1e-5));
    REQUIRE(r.top.size() == 2);
    CHECK(r.top[0].token == 4);
    CHECK(r.top[1].token == 0);
    logits[2] = std::nanf("");
    CHECK(reference::sample_token(logits, g, {}, {}, 0.1).nonfinite);
}
