// Op cases of family attn_res against model/reference/attn_res (fp64 scores and sums over the same bf16
// candidates): no banked block (the identity), the K3 worst case of 8 blocks plus the partial sum at hidden
// 7168, a bank holding more rows than the call (its block stride), and the 16-candidate limit. Pseudo-queries
// are small (as trained ones are), so the softmax weights spread over several candidates. Tolerance: bf16
// output, relative L2 error 4e-3.
#include <fmt/format.h>

#include "jit/families/attn_res.hpp"
#include "model/reference/attn_res.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;

constexpr double k_bound = 4e-3;
constexpr float k_eps = 1e-5f;

struct MixShape {
    int rows, dim, blocks;
    int bank_rows = 0;  // rows per banked block (0: rows)
    int threads = 0;
};

class AttnResCase final : public DenseCase {
public:
    AttnResCase(MixShape s, uint64_t seed) : s_(s), seed_(seed) {}
    // Inputs and the reference, once, on first use (constructing the case list stays cheap).
    void prepare(uint64_t seed) {
        const MixShape& s = s_;
        bank_rows_ = s.bank_rows ? s.bank_rows : s.rows;
        bank_ = test::random_bf16(size_t(std::max(1, s.blocks)) * bank_rows_ * s.dim, seed, 2.0f);
        cur_ = test::random_bf16(size_t(s.rows) * s.dim, seed + 1, 1.0f);
        site_.proj = test::random_f32(size_t(s.dim), seed + 2, -0.06f, 0.06f);
        site_.norm = test::random_f32(size_t(s.dim), seed + 3, 0.5f, 1.5f);
        score_ = jit::attn_res_fold(site_.norm, site_.proj);
        const std::vector<float> bank = to_f32(bank_), cur = to_f32(cur_);
        std::vector<float> out(size_t(s.dim));
        std::vector<const float*> cand(size_t(s.blocks) + 1);
        for (int t = 0; t < s.rows; ++t) {
            for (int i = 0; i < s.blocks; ++i) cand[size_t(i)] = bank.data() + (size_t(i) * bank_rows_ + t) * s.dim;
            cand[size_t(s.blocks)] = cur.data() + size_t(t) * s.dim;
            model::reference::attn_res_mix(cand.data(), cand.size(), size_t(s.dim), site_, k_eps, out.data());
            ref_.insert(ref_.end(), out.begin(), out.end());
        }
    }
    std::string family() const override { return "attn_res"; }
    std::string name() const override {
        return fmt::format("attn_res: {} rows of {}, {} blocks{}{}", s_.rows, s_.dim, s_.blocks,
                           s_.bank_rows ? fmt::format(" (bank of {} rows)", s_.bank_rows) : "",
                           s_.threads ? fmt::format(", {} threads", s_.threads) : "");
    }
    void setup(test::TestBackend& b) override {
        if (!ready_) {
            prepare(seed_);
            ready_ = true;
        }
        kernel_ = &b.disp->get(jit::AttnResFamily::descriptor(target_of(b), s_.threads));
        input(bank_d_, *b.backend, bank_);
        input(cur_d_, *b.backend, cur_);
        input(score_d_, *b.backend, score_);
        output(out_d_, *b.backend, ref_.size() * 2);
    }
    void run(test::TestBackend& b) override {
        jit::AttnResArgs a;
        if (s_.blocks) a.bank = bank_d_.view(DType::bf16, {s_.blocks, bank_rows_, s_.dim});
        a.blocks = s_.blocks;
        a.current = cur_d_.view(DType::bf16, {s_.rows, s_.dim});
        a.score = score_d_.view(DType::f32, {s_.dim});
        a.out = out_d_.view(DType::bf16, {s_.rows, s_.dim});
        a.eps = k_eps;
        jit::launch_attn_res(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        expect_within(bad, "out", test::bf16_error(test::download<uint16_t>(*b.backend, out_d_, ref_.size()), ref_),
                      k_bound);
        return bad;
    }
    Cost cost() const override {
        const double n = double(s_.rows) * s_.dim * (s_.blocks + 1);
        return {n * 2 + double(s_.rows) * s_.dim * 2 + double(s_.dim) * 4, n * 6};
    }

private:
    MixShape s_;
    uint64_t seed_ = 0;
    bool ready_ = false;
    int bank_rows_ = 0;
    std::vector<uint16_t> bank_, cur_;
    model::reference::AttnResSite site_;
    std::vector<float> score_;
    std::vector<double> ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer bank_d_, cur_d_, score_d_, out_d_;
};

}  // namespace

void add_attn_res_cases(CaseList& out) {
    const MixShape shapes[] = {
        {3, 7168, 0}, {1, 7168, 8}, {17, 7168, 8}, {5, 1024, 3, 40}, {2, 256, 15, 0, 64}, {40, 512, 1, 0, 1024},
    };
    uint64_t seed = 700;
    for (const MixShape& s : shapes) out.push_back(std::make_unique<AttnResCase>(s, seed += 10));
}

}  // namespace kiln::ops
