// Op cases of family sample against a reference of the semantics in templates/common/sample_params.h
// (penalties and z in fp32 as the kernels compute them, thresholds and log-softmax in fp64, the same
// Philox uniforms): greedy with and without penalties (the raw argmax is among the generated tokens, so
// the penalties must move it), temperature alone, top-k, top-p, min-p and all of them with the fed token,
// the full K3 vocabulary (163840) with 20 top logprobs, a NaN row, and a distribution check: 4096
// sequences with the same logits and different steps must draw every token with its softmax probability
// (absolute error <= 0.03, over 4 standard deviations). Tokens must match exactly; logprobs within 2e-4
// absolute; the counts workspace must be zero again after every run.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "common/philox.h"
#include "jit/families/sample.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;
using kiln_params::SampleOut;
using kiln_params::SampleSeq;

struct SeqSpec {
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
    float presence = 0.0f, frequency = 0.0f, repetition = 1.0f;
    int top_k = 0, logprobs = 0;
    bool want_logprob = false;
    int gen = 0, prompt = 0;  // penalty list lengths
    bool fed = false;
    bool nan = false;
};

struct SampleShape {
    std::string label;
    int vocab;
    std::vector<SeqSpec> seqs;
    int repeat = 1;            // each spec this many times (with steps 0, 1, ...)
    bool same_logits = false;  // every sequence the same row: the distribution check
    int threads = 0;
    bool quick = true;
};

struct RefResult {
    int token = -1;
    bool nonfinite = false;
    double logprob = 0;
    std::vector<std::pair<int, double>> top;
};

class SampleCase final : public DenseCase {
public:
    SampleCase(SampleShape s, uint64_t seed) : s_(std::move(s)), seed_(seed) {}
    std::string family() const override { return "sample"; }
    std::string name() const override {
        return fmt::format("sample {}: {} sequences, vocab {}{}", s_.label, s_.seqs.size() * size_t(s_.repeat), s_.vocab,
                           s_.threads ? fmt::format(", {} threads", s_.threads) : "");
    }
    bool quick() const override { return s_.quick; }

    void prepare() {
        std::mt19937_64 rng(seed_);
        std::normal_distribution<float> nd(0.0f, 2.0f);
        const int V = s_.vocab;
        S_ = int(s_.seqs.size()) * s_.repeat;
        logits_.resize(size_t(S_) * V);
        for (int r = 0; r < S_; ++r)
            for (int i = 0; i < V; ++i)
                logits_[size_t(r) * V + i] = s_.same_logits && r > 0 ? logits_[size_t(i)] : nd(rng);
        prev_ = {int32_t(rng() % V), int32_t(rng() % V), int32_t(rng() % V)};
        for (int r = 0; r < S_; ++r) {
            const SeqSpec& sp = s_.seqs[size_t(r) % s_.seqs.size()];
            float* row = logits_.data() + size_t(r) * V;
            if (sp.nan) row[rng() % V] = std::nanf("");
            SampleSeq q{};
            q.temperature = sp.temperature;
            q.top_p = sp.top_p;
            q.min_p = sp.min_p;
            q.presence = sp.presence;
            q.frequency = sp.frequency;
            q.repetition = sp.repetition;
            q.top_k = sp.top_k;
            q.logprobs = sp.logprobs;
            q.seed = 0x5eed0000ull + uint64_t(r % int(s_.seqs.size())) * 977;
            q.step = uint64_t(r / int(s_.seqs.size())) + 3;
            q.flags = sp.want_logprob ? 1 : 0;
            q.feed_src = sp.fed ? int(r % 3) : -1;
            const int argmax = int(std::max_element(row, row + V) - row);
            q.gen_begin = int(tokens_.size());
            q.gen_count = sp.gen;
            for (int j = 0; j < sp.gen; ++j) tokens_.push_back(j == 0 ? argmax : int32_t(rng() % (V / 4 + 1)));
            q.prompt_begin = int(tokens_.size());
            q.prompt_count = sp.prompt;
            for (int j = 0; j < sp.prompt; ++j) tokens_.push_back(int32_t(rng() % V));
            seqs_.push_back(q);
            ref_.push_back(reference(q, row));
        }
        if (tokens_.empty()) tokens_.push_back(0);
    }

    void setup(test::TestBackend& b) override {
        if (S_ == 0) prepare();
        kernel_ = &b.disp->get(jit::SampleFamily::descriptor(target_of(b), s_.threads));
        runtime::Backend& be = *b.backend;
        input(logits_d_, be, logits_);
        input(seqs_d_, be, seqs_);
        input(tokens_d_, be, tokens_);
        input(prev_d_, be, prev_);
        input(counts_d_, be, std::vector<uint32_t>(size_t(S_) * s_.vocab, 0u));
        output(out_d_, be, size_t(S_) * sizeof(SampleOut));
        output(tok_d_, be, size_t(S_) * 4);
    }
    void run(test::TestBackend& b) override {
        jit::SampleArgs a;
        a.logits = logits_d_.view(DType::f32, {S_, s_.vocab});
        a.vocab = s_.vocab;
        a.seqs = seqs_d_.view(DType::u8, {S_, int64_t(sizeof(SampleSeq))});
        a.penalty_tokens = tokens_d_.view(DType::i32, {int64_t(tokens_.size())});
        a.prev_tokens = prev_d_.view(DType::i32, {int64_t(prev_.size())});
        a.counts = counts_d_.view(DType::u32, {S_, s_.vocab});
        a.out = out_d_.view(DType::u8, {S_, int64_t(sizeof(SampleOut))});
        a.tokens_out = tok_d_.view(DType::i32, {S_});
        jit::launch_sample(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        const auto out = test::download<SampleOut>(*b.backend, out_d_, size_t(S_));
        const auto toks = test::download<int32_t>(*b.backend, tok_d_, size_t(S_));
        const auto counts = test::download<uint32_t>(*b.backend, counts_d_, size_t(S_) * s_.vocab);
        if (std::any_of(counts.begin(), counts.end(), [](uint32_t c) { return c != 0; }))
            bad.push_back("the counts workspace is not zero after the run");
        std::vector<double> freq(static_cast<size_t>(s_.vocab), 0.0);
        for (int r = 0; r < S_ && bad.size() < 8; ++r) {
            const RefResult& e = ref_[size_t(r)];
            const SampleOut& g = out[size_t(r)];
            const SampleSeq& q = seqs_[size_t(r)];
            if (g.nonfinite != (e.nonfinite ? 1 : 0) || g.token != e.token || toks[size_t(r)] != e.token) {
                bad.push_back(fmt::format("seq {}: token {} (tokens_out {}, nonfinite {}), expected {} (nonfinite {})", r,
                                          g.token, toks[size_t(r)], g.nonfinite, e.token, e.nonfinite));
                continue;
            }
            if (e.token >= 0) freq[size_t(e.token)] += 1.0 / S_;
            if ((q.flags & 1) && !e.nonfinite && std::abs(g.logprob - e.logprob) > 2e-4)
                bad.push_back(fmt::format("seq {}: logprob {}, expected {}", r, g.logprob, e.logprob));
            if (g.top_count != int(e.top.size())) {
                bad.push_back(fmt::format("seq {}: {} top entries, expected {}", r, g.top_count, e.top.size()));
                continue;
            }
            for (size_t j = 0; j < e.top.size(); ++j)
                if (g.top[j].token != e.top[j].first || std::abs(g.top[j].logprob - e.top[j].second) > 2e-4)
                    bad.push_back(fmt::format("seq {}: top {} is ({}, {}), expected ({}, {})", r, j, g.top[j].token,
                                              g.top[j].logprob, e.top[j].first, e.top[j].second));
        }
        if (s_.same_logits && bad.empty()) {
            // The reference's draws are the kernel's; check them against softmax(z).
            const SeqSpec& sp = s_.seqs[0];
            std::vector<double> p(static_cast<size_t>(s_.vocab));
            double mx = *std::max_element(logits_.begin(), logits_.begin() + s_.vocab), sum = 0;
            for (int i = 0; i < s_.vocab; ++i) sum += (p[size_t(i)] = std::exp((logits_[size_t(i)] - mx) / sp.temperature));
            for (int i = 0; i < s_.vocab; ++i)
                if (std::abs(freq[size_t(i)] - p[size_t(i)] / sum) > 0.03)
                    bad.push_back(fmt::format("token {} drawn {:.4f} of the time, probability {:.4f}", i, freq[size_t(i)],
                                              p[size_t(i)] / sum));
        }
        return bad;
    }
    Cost cost() const override {
        const double n = double(s_.seqs.size()) * s_.repeat * s_.vocab;
        return {n * 4, n * 8};
    }

private:
    RefResult reference(const SampleSeq& q, const float* l) const {
        const int V = s_.vocab;
        RefResult r;
        for (int i = 0; i < V; ++i)
            if (!std::isfinite(l[i])) {
                r.nonfinite = true;
                return r;
            }
        const double mx = *std::max_element(l, l + V);
        double sum = 0;
        for (int i = 0; i < V; ++i) sum += std::exp(double(l[i]) - mx);
        const double lse = mx + std::log(sum);
        std::vector<uint32_t> n(size_t(V), 0);
        std::vector<bool> prompt(size_t(V), false);
        for (int j = 0; j < q.gen_count; ++j) ++n[size_t(tokens_[size_t(q.gen_begin + j)])];
        for (int j = 0; j < q.prompt_count; ++j) prompt[size_t(tokens_[size_t(q.prompt_begin + j)])] = true;
        if (q.feed_src >= 0) ++n[size_t(prev_[size_t(q.feed_src)])];
        const bool pen = q.repetition != 1.0f || q.frequency != 0.0f || q.presence != 0.0f;
        std::vector<float> a(l, l + V);
        if (pen)
            for (int i = 0; i < V; ++i) {
                if (n[size_t(i)] == 0 && !(prompt[size_t(i)] && q.repetition != 1.0f)) continue;
                float v = a[size_t(i)];
                if (q.repetition != 1.0f) v = v > 0.0f ? v / q.repetition : v * q.repetition;
                const float c = float(n[size_t(i)]);
                a[size_t(i)] = (v - q.frequency * c) - (c > 0.0f ? q.presence : 0.0f);
            }
        if (!(q.temperature > 0.0f)) {
            r.token = int(std::max_element(a.begin(), a.end()) - a.begin());  // the first of equal maxima
        } else {
            const float inv_t = 1.0f / q.temperature;
            std::vector<float> z(static_cast<size_t>(V));
            for (int i = 0; i < V; ++i) z[size_t(i)] = a[size_t(i)] * inv_t;
            std::vector<float> sorted = z;
            std::sort(sorted.begin(), sorted.end(), std::greater<>());
            const double zmax = sorted[0];
            double lo = -INFINITY;
            if (q.min_p > 0.0f) lo = float(zmax + double(std::log(q.min_p)));
            if (q.top_k > 0 && q.top_k < V) lo = std::max(lo, double(sorted[size_t(q.top_k - 1)]));
            if (q.top_p < 1.0f) {
                double total = 0;
                for (float v : sorted)
                    if (v >= lo) total += std::exp(double(v) - zmax);
                double cum = 0;
                for (float v : sorted) {
                    if (v < lo) break;
                    cum += std::exp(double(v) - zmax);
                    if (cum >= double(q.top_p) * total) {
                        lo = std::max(lo, double(v));
                        break;
                    }
                }
            }
            double best = -INFINITY;
            for (int i = 0; i < V; ++i) {
                if (double(z[size_t(i)]) < lo) continue;
                const double u = kiln_params::sample_uniform(q.seed, q.step, uint32_t(i));
                const double v = double(z[size_t(i)]) - std::log(-std::log(u));
                if (v > best) {
                    best = v;
                    r.token = i;
                }
            }
        }
        r.logprob = double(l[r.token]) - lse;
        std::vector<int> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        const size_t k = size_t(std::min(q.logprobs, 20));
        std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(),
                          [&](int x, int y) { return l[x] != l[y] ? l[x] > l[y] : x < y; });
        for (size_t j = 0; j < k; ++j) r.top.emplace_back(order[j], double(l[order[j]]) - lse);
        return r;
    }

    SampleShape s_;
    uint64_t seed_;
    int S_ = 0;
    std::vector<float> logits_;
    std::vector<SampleSeq> seqs_;
    std::vector<int32_t> tokens_, prev_;
    std::vector<RefResult> ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer logits_d_, seqs_d_, tokens_d_, prev_d_, counts_d_, out_d_, tok_d_;
};

}  // namespace

void add_sample_cases(CaseList& out) {
    SeqSpec greedy, greedy_pen, hot, topk, topp, minp, all, lp;
    greedy.logprobs = 3;
    greedy.want_logprob = true;
    greedy_pen.repetition = 1.3f;
    greedy_pen.frequency = 0.4f;
    greedy_pen.presence = 0.6f;
    greedy_pen.gen = 12;
    greedy_pen.prompt = 40;
    greedy_pen.want_logprob = true;
    hot.temperature = 0.8f;
    topk.temperature = 1.0f;
    topk.top_k = 20;
    topp.temperature = 0.7f;
    topp.top_p = 0.9f;
    minp.temperature = 1.5f;
    minp.min_p = 0.05f;
    all = greedy_pen;
    all.temperature = 1.2f;
    all.top_k = 50;
    all.top_p = 0.8f;
    all.min_p = 0.02f;
    all.fed = true;
    all.logprobs = 5;
    lp.temperature = 0.6f;
    lp.top_p = 0.95f;
    lp.logprobs = 20;
    lp.want_logprob = true;
    SeqSpec nan = hot;
    nan.nan = true;
    SeqSpec fed_greedy = greedy_pen;
    fed_greedy.fed = true;
    SeqSpec dist;
    dist.temperature = 1.0f;

    out.push_back(std::make_unique<SampleCase>(
        SampleShape{"mixed", 1000, {greedy, greedy_pen, hot, topk, topp, minp, all, lp, nan, fed_greedy}, 3}, 1300));
    out.push_back(std::make_unique<SampleCase>(SampleShape{"K3 vocabulary", 163840, {greedy, lp, nan, all}}, 1310));
    out.push_back(std::make_unique<SampleCase>(SampleShape{"filters", 32000, {topk, topp, minp, all}, 2, false, 256}, 1320));
    out.push_back(std::make_unique<SampleCase>(SampleShape{"distribution", 16, {dist}, 4096, true}, 1330));
}

}  // namespace kiln::ops
