// Op cases of family rmsnorm against the fp64-accumulated reference RMSNorm (model/reference/tensor_ops):
// rows at K3 widths, the residual add (the sum checked bit for bit; also written in place over x), and the
// per-head norm with and without the sigmoid gate. Tolerance: bf16 outputs, relative L2 error 4e-3 (one
// bf16 rounding is 2^-9 relative).
#include <cmath>

#include <fmt/format.h>

#include "jit/families/rmsnorm.hpp"
#include "model/reference/tensor_ops.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;
using jit::RmsNormMode;

constexpr double k_bound = 4e-3;
constexpr float k_eps = 1e-5f;

struct NormShape {
    RmsNormMode mode;
    int rows, cols, group;  // group: the head size in heads mode
    bool gate = false;
    bool in_place = false;  // add: the sum overwrites x
    int threads = 0;
};

class RmsNormCase final : public DenseCase {
public:
    RmsNormCase(NormShape s, uint64_t seed) : s_(s), seed_(seed) {}
    // Inputs and the reference, once, on first use (constructing the case list stays cheap).
    void prepare(uint64_t seed) {
        const NormShape& s = s_;
        const size_t n = size_t(s.rows) * s.cols;
        x_ = test::random_bf16(n, seed, 1.5f);
        r_ = test::random_bf16(n, seed + 1, 0.7f);
        g_ = test::random_bf16(n, seed + 2, 2.0f);
        w_ = to_bf16(test::random_f32(size_t(group()), seed + 3, 0.5f, 1.5f));
        // Reference.
        std::vector<float> src = to_f32(x_);
        if (s.mode == RmsNormMode::add) {
            sum_ref_.resize(n);
            for (size_t i = 0; i < n; ++i) {
                sum_ref_[i] = runtime::float_to_bf16(runtime::bf16_to_float(x_[i]) + runtime::bf16_to_float(r_[i]));
                src[i] = runtime::bf16_to_float(sum_ref_[i]);
            }
        }
        const std::vector<float> w = to_f32(w_);
        std::vector<float> y(n);
        for (size_t base = 0; base < n; base += size_t(group()))
            model::reference::rmsnorm(src.data() + base, w.data(), size_t(group()), k_eps, y.data() + base);
        ref_.assign(y.begin(), y.end());
        if (s.gate)
            for (size_t i = 0; i < n; ++i) ref_[i] *= 1.0 / (1.0 + std::exp(-double(runtime::bf16_to_float(g_[i]))));
    }
    std::string family() const override { return "rmsnorm"; }
    std::string name() const override {
        const char* m = s_.mode == RmsNormMode::rows ? "rows" : s_.mode == RmsNormMode::add ? "add" : "heads";
        return fmt::format("rmsnorm {}: [{}, {}]{}{}{}{}", m, s_.rows, s_.cols,
                           s_.mode == RmsNormMode::heads ? fmt::format(" heads of {}", s_.group) : "",
                           s_.gate ? " gated" : "", s_.in_place ? " in place" : "",
                           s_.threads ? fmt::format(", {} threads", s_.threads) : "");
    }
    void setup(test::TestBackend& b) override {
        if (!ready_) {
            prepare(seed_);
            ready_ = true;
        }
        kernel_ = &b.disp->get(jit::RmsNormFamily::descriptor(s_.mode, target_of(b), s_.threads));
        runtime::Backend& be = *b.backend;
        input(x_d_, be, x_);
        input(r_d_, be, r_);
        input(g_d_, be, g_);
        input(w_d_, be, w_);
        output(y_d_, be, x_.size() * 2);
        if (s_.mode == RmsNormMode::add && !s_.in_place) output(sum_d_, be, x_.size() * 2);
    }
    void run(test::TestBackend& b) override {
        if (s_.in_place) b.stream->upload(x_d_.addr(), x_.data(), x_.size() * 2);  // the previous run overwrote x
        jit::RmsNormArgs a;
        a.x = x_d_.view(DType::bf16, {s_.rows, s_.cols});
        a.weight = w_d_.view(DType::bf16, {group()});
        a.y = y_d_.view(DType::bf16, {s_.rows, s_.cols});
        if (s_.mode == RmsNormMode::add) {
            a.residual = r_d_.view(DType::bf16, {s_.rows, s_.cols});
            a.sum = (s_.in_place ? x_d_ : sum_d_).view(DType::bf16, {s_.rows, s_.cols});
        }
        if (s_.gate) a.gate = g_d_.view(DType::bf16, {s_.rows, s_.cols});
        a.eps = k_eps;
        jit::launch_rmsnorm(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        expect_within(bad, "y", test::bf16_error(test::download<uint16_t>(*b.backend, y_d_, x_.size()), ref_), k_bound);
        if (s_.mode == RmsNormMode::add) {
            const auto sum = test::download<uint16_t>(*b.backend, s_.in_place ? x_d_ : sum_d_, x_.size());
            if (sum != sum_ref_) bad.push_back("sum differs from bf16(x + residual)");
        }
        return bad;
    }
    Cost cost() const override {
        const double n = double(s_.rows) * s_.cols * 2;
        const double io = s_.mode == RmsNormMode::add ? 4 : s_.gate ? 3 : 2;
        return {n * io, n * 2};
    }

private:
    int group() const { return s_.mode == RmsNormMode::heads ? s_.group : s_.cols; }
    NormShape s_;
    uint64_t seed_ = 0;
    bool ready_ = false;
    std::vector<uint16_t> x_, r_, g_, w_, sum_ref_;
    std::vector<double> ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer x_d_, r_d_, g_d_, w_d_, y_d_, sum_d_;
};

}  // namespace

void add_rmsnorm_cases(CaseList& out) {
    const NormShape shapes[] = {
        {RmsNormMode::rows, 1, 7168, 0},         {RmsNormMode::rows, 37, 7168, 0},
        {RmsNormMode::rows, 5, 1000, 0, false, false, 64},  {RmsNormMode::rows, 3, 1536, 0},  // q_lora
        {RmsNormMode::rows, 9, 512, 0},          // kv latent
        {RmsNormMode::add, 1, 7168, 0},          {RmsNormMode::add, 19, 7168, 0, false, true},
        {RmsNormMode::add, 4, 3584, 0, false, false, 1024},  // the latent width
        {RmsNormMode::heads, 3, 12 * 128, 128},  {RmsNormMode::heads, 7, 12 * 128, 128, true},
        {RmsNormMode::heads, 2, 8 * 32, 32, true, false, 64}, {RmsNormMode::heads, 33, 5 * 48, 48, true},
    };
    uint64_t seed = 100;
    for (const NormShape& s : shapes) out.push_back(std::make_unique<RmsNormCase>(s, seed += 10));
}

}  // namespace kiln::ops
