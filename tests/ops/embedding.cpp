// Op cases of family embedding: rows gathered bit for bit, fed tokens read from the previous step's token
// array through the feed map (entries pointing past it leave the id alone), ids outside the shard
// (negative, past the vocabulary, another rank's shard) as zero rows, and the ids used written back.
#include <fmt/format.h>

#include "jit/families/embedding.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;

struct EmbShape {
    int tokens, vocab, dim;
    int fed;              // feed map entries
    int vocab_start = 0;  // shard offset
    int threads = 0;
};

class EmbeddingCase final : public DenseCase {
public:
    EmbeddingCase(EmbShape s, uint64_t seed) : s_(s), seed_(seed) {}
    // Inputs and the reference, once, on first use (constructing the case list stays cheap).
    void prepare(uint64_t seed) {
        const EmbShape& s = s_;
        std::mt19937_64 rng(seed);
        table_ = test::random_bf16(size_t(s.vocab) * s.dim, seed + 1);
        const int lo = s.vocab_start, hi = s.vocab_start + s.vocab;
        ids_.resize(size_t(s.tokens));
        for (int t = 0; t < s.tokens; ++t) {
            const uint64_t r = rng() % 16;
            ids_[size_t(t)] = r == 0 ? -1 : r == 1 ? hi + int(rng() % 5) : r == 2 && lo > 0 ? int(rng() % lo)
                                                                                        : lo + int(rng() % s.vocab);
        }
        prev_.resize(size_t(s.fed) + 3);
        for (auto& p : prev_) p = lo + int(rng() % s.vocab);
        for (int f = 0; f < s.fed; ++f) {
            const int row = int(rng() % s.tokens);
            const int src = f == 0 && s.fed > 1 ? int(prev_.size()) + 2 : int(rng() % prev_.size());  // one past the end
            feed_.push_back(row);
            feed_.push_back(src);
        }
        used_ = ids_;
        for (size_t f = 0; f < feed_.size(); f += 2)
            if (feed_[f + 1] < int(prev_.size())) used_[size_t(feed_[f])] = prev_[size_t(feed_[f + 1])];
        ref_.assign(size_t(s.tokens) * s.dim, 0);
        for (int t = 0; t < s.tokens; ++t) {
            const int local = used_[size_t(t)] - lo;
            if (local >= 0 && local < s.vocab)
                std::copy_n(table_.begin() + ptrdiff_t(local) * s.dim, s.dim, ref_.begin() + ptrdiff_t(t) * s.dim);
        }
    }
    std::string family() const override { return "embedding"; }
    std::string name() const override {
        return fmt::format("embedding: {} tokens of [{}, {}], {} fed, shard at {}{}", s_.tokens, s_.vocab, s_.dim, s_.fed,
                           s_.vocab_start, s_.threads ? fmt::format(", {} threads", s_.threads) : "");
    }
    void setup(test::TestBackend& b) override {
        if (!ready_) {
            prepare(seed_);
            ready_ = true;
        }
        kernel_ = &b.disp->get(jit::EmbeddingFamily::descriptor(target_of(b), s_.threads));
        runtime::Backend& be = *b.backend;
        input(table_d_, be, table_);
        input(ids_d_, be, ids_);
        input(prev_d_, be, prev_);
        if (!feed_.empty()) input(feed_d_, be, feed_);
        output(out_d_, be, ref_.size() * 2);
        output(used_d_, be, ids_.size() * 4);
    }
    void run(test::TestBackend& b) override {
        jit::EmbeddingArgs a;
        a.ids = ids_d_.view(DType::i32, {s_.tokens});
        a.table = table_d_.view(DType::bf16, {s_.vocab, s_.dim});
        a.out = out_d_.view(DType::bf16, {s_.tokens, s_.dim});
        if (!feed_.empty()) {
            a.feed = feed_d_.view(DType::i32, {int64_t(feed_.size() / 2), 2});
            a.prev_tokens = prev_d_.view(DType::i32, {int64_t(prev_.size())});
        }
        a.ids_out = used_d_.view(DType::i32, {s_.tokens});
        a.vocab_start = s_.vocab_start;
        jit::launch_embedding(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        if (test::download<uint16_t>(*b.backend, out_d_, ref_.size()) != ref_) bad.push_back("rows differ");
        if (test::download<int32_t>(*b.backend, used_d_, used_.size()) != used_) bad.push_back("ids_out differs");
        return bad;
    }
    Cost cost() const override { return {double(s_.tokens) * s_.dim * 4 + double(s_.tokens) * 8, 0}; }

private:
    EmbShape s_;
    uint64_t seed_ = 0;
    bool ready_ = false;
    std::vector<uint16_t> table_, ref_;
    std::vector<int32_t> ids_, prev_, feed_, used_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer table_d_, ids_d_, prev_d_, feed_d_, out_d_, used_d_;
};

}  // namespace

void add_embedding_cases(CaseList& out) {
    const EmbShape shapes[] = {
        {1, 1000, 7168, 0}, {1, 1000, 7168, 1}, {64, 4096, 7168, 40}, {300, 777, 64, 0, 0, 32},
        {45, 2048, 1024, 7, 20480}, {9, 128, 8, 3, 0, 256},
    };
    uint64_t seed = 500;
    for (const EmbShape& s : shapes) out.push_back(std::make_unique<EmbeddingCase>(s, seed += 10));
}

}  // namespace kiln::ops
