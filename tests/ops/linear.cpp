// Op cases of family linear against an fp64 GEMM over the same bf16 inputs: decode and prefill rows at the
// K3 TP8 shapes (hidden 7168), fp32 outputs (router logits, an lm_head slice), ragged M, N and a K that is
// not a multiple of the 32-wide K step (zero-filled tail), and the device tiles (block_m x block_n with
// their warps; the host target has one kernel per output type). Tolerance: relative L2 error 4e-3 for bf16
// outputs (one rounding), 1e-5 for fp32 outputs (fp32 accumulation over K <= 7168 of O(1) terms).
#include <fmt/format.h>

#include "jit/families/linear.hpp"
#include "model/layers/linear.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;
using jit::LinearOut;

struct GemmShape {
    int m, n, k;
    LinearOut out = LinearOut::bf16;
    int block_m = 0, block_n = 0, warps_m = 0, warps_n = 0;
    bool quick = true;
};

class LinearCase final : public DenseCase {
public:
    LinearCase(GemmShape s, uint64_t seed) : s_(s), seed_(seed) {}
    // Inputs and the reference, once, on first use (constructing the case list stays cheap).
    void prepare(uint64_t seed) {
        const GemmShape& s = s_;
        x_ = test::random_bf16(size_t(s.m) * s.k, seed, 1.0f);
        w_ = test::random_bf16(size_t(s.n) * s.k, seed + 1, 0.02f);
        const std::vector<float> x = to_f32(x_), w = to_f32(w_);
        ref_.resize(size_t(s.m) * s.n);
        for (int i = 0; i < s.m; ++i)
            for (int j = 0; j < s.n; ++j) {
                double acc = 0;
                const float* a = x.data() + size_t(i) * s.k;
                const float* b = w.data() + size_t(j) * s.k;
                for (int k = 0; k < s.k; ++k) acc += double(a[k]) * double(b[k]);
                ref_[size_t(i) * s.n + j] = acc;
            }
    }
    std::string family() const override { return "linear"; }
    std::string name() const override {
        return fmt::format("linear: [{}, {}] x [{}, {}]^T -> {}{}", s_.m, s_.k, s_.n, s_.k,
                           s_.out == LinearOut::f32 ? "f32" : "bf16",
                           s_.block_m ? fmt::format(", tile {}x{} warps {}x{}", s_.block_m, s_.block_n, s_.warps_m, s_.warps_n)
                                      : "");
    }
    bool quick() const override { return s_.quick; }
    void setup(test::TestBackend& b) override {
        if (!ready_) {
            prepare(seed_);
            ready_ = true;
        }
        kernel_ = &b.disp->get(
            jit::LinearFamily::descriptor(s_.out, target_of(b), s_.block_m, s_.block_n, s_.warps_m, s_.warps_n));
        input(x_d_, *b.backend, x_);
        input(w_d_, *b.backend, w_);
        output(y_d_, *b.backend, ref_.size() * (s_.out == LinearOut::f32 ? 4 : 2));
    }
    void run(test::TestBackend& b) override {
        jit::LinearArgs a;
        a.x = x_d_.view(DType::bf16, {s_.m, s_.k});
        a.w = w_d_.view(DType::bf16, {s_.n, s_.k});
        a.y = y_d_.view(s_.out == LinearOut::f32 ? DType::f32 : DType::bf16, {s_.m, s_.n});
        jit::launch_linear(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        if (s_.out == LinearOut::f32)
            expect_within(bad, "y", test::f32_error(test::download<float>(*b.backend, y_d_, ref_.size()), ref_), 1e-5);
        else
            expect_within(bad, "y", test::bf16_error(test::download<uint16_t>(*b.backend, y_d_, ref_.size()), ref_), 4e-3);
        return bad;
    }
    Cost cost() const override {
        const double out = s_.out == LinearOut::f32 ? 4 : 2;
        return {double(s_.m) * s_.k * 2 + double(s_.n) * s_.k * 2 + double(s_.m) * s_.n * out,
                2.0 * s_.m * s_.n * s_.k};
    }

private:
    GemmShape s_;
    uint64_t seed_ = 0;
    bool ready_ = false;
    std::vector<uint16_t> x_, w_;
    std::vector<double> ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer x_d_, w_d_, y_d_;
};

}  // namespace

void add_linear_cases(CaseList& out) {
    const GemmShape shapes[] = {
        {1, 1536, 7168},                                   // q_a (decode)
        {4, 576, 7168, LinearOut::bf16, 16, 64, 1, 4},     // kv_a, decode tile
        {1, 896, 7168, LinearOut::f32, 16, 64, 1, 4},      // router logits
        {2, 2560, 7168, LinearOut::f32},                   // an lm_head slice
        {37, 100, 72},                                     // ragged M, N; K tail of 8
        {70, 200, 264, LinearOut::bf16, 32, 32, 2, 1},
        {130, 384, 1024, LinearOut::bf16, 128, 128, 2, 4},
        {64, 7168, 1536, LinearOut::bf16, 64, 128, 2, 2, false},  // o_proj-like prefill
        {256, 1024, 7168, LinearOut::bf16, 128, 128, 2, 4, false},
        {9, 3, 16, LinearOut::f32, 16, 32, 1, 1},
    };
    uint64_t seed = 1100;
    for (const GemmShape& s : shapes) out.push_back(std::make_unique<LinearCase>(s, seed += 10));
}

}  // namespace kiln::ops

// The linear layer (model/layers/linear.hpp) over one weight at several row counts, one plan each: on the
// CUDA device cuBLASLt where it loads (the family otherwise), on the host target the family. Same
// reference and tolerances as the family's cases.
namespace kiln::ops {

namespace {

class LinearLayerCase final : public DenseCase {
public:
    LinearLayerCase(std::vector<int> ms, int n, int k, jit::LinearOut out, uint64_t seed)
        : ms_(std::move(ms)), n_(n), k_(k), out_(out), seed_(seed) {}
    std::string family() const override { return "linear_layer"; }
    std::string name() const override {
        std::string m;
        for (int v : ms_) m += fmt::format("{}{}", m.empty() ? "" : ",", v);
        return fmt::format("linear layer: M {} x [{}, {}]^T -> {}", m, n_, k_, out_ == jit::LinearOut::f32 ? "f32" : "bf16");
    }
    void setup(test::TestBackend& b) override {
        if (x_.empty()) {
            int total = 0;
            for (int m : ms_) total += m;
            x_ = test::random_bf16(size_t(total) * k_, seed_, 1.0f);
            w_ = test::random_bf16(size_t(n_) * k_, seed_ + 1, 0.02f);
            const std::vector<float> x = to_f32(x_), w = to_f32(w_);
            ref_.resize(size_t(total) * n_);
            for (int i = 0; i < total; ++i)
                for (int j = 0; j < n_; ++j) {
                    double acc = 0;
                    for (int kk = 0; kk < k_; ++kk) acc += double(x[size_t(i) * k_ + kk]) * w[size_t(j) * k_ + kk];
                    ref_[size_t(i) * n_ + j] = acc;
                }
        }
        layer_ = std::make_unique<model::layers::Linear>(*b.disp, *b.backend, model::layers::LinearShape{n_, k_, out_},
                                                         autotune::default_linear_tuning(),
                                                         model::layers::make_cublaslt(*b.backend));
        plans_.clear();
        for (int m : ms_) plans_.push_back(layer_->plan(m));
        input(x_d_, *b.backend, x_);
        input(w_d_, *b.backend, w_);
        output(y_d_, *b.backend, ref_.size() * (out_ == jit::LinearOut::f32 ? 4 : 2));
    }
    void run(test::TestBackend& b) override {
        const size_t es = out_ == jit::LinearOut::f32 ? 4 : 2;
        int64_t row = 0;
        for (size_t i = 0; i < ms_.size(); ++i) {
            const int64_t m = ms_[i];
            jit::LinearArgs a;
            a.x = runtime::TensorView::contiguous(static_cast<uint16_t*>(x_d_.data()) + row * k_, DType::bf16, {m, k_},
                                                  b.backend->location());
            a.w = w_d_.view(DType::bf16, {n_, k_});
            a.y = runtime::TensorView::contiguous(static_cast<char*>(y_d_.data()) + row * n_ * es,
                                                  out_ == jit::LinearOut::f32 ? DType::f32 : DType::bf16, {m, n_},
                                                  b.backend->location());
            layer_->run(plans_[i], a, *b.stream);
            row += m;
        }
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        if (out_ == jit::LinearOut::f32)
            expect_within(bad, "y", test::f32_error(test::download<float>(*b.backend, y_d_, ref_.size()), ref_), 1e-5);
        else
            expect_within(bad, "y", test::bf16_error(test::download<uint16_t>(*b.backend, y_d_, ref_.size()), ref_), 4e-3);
        return bad;
    }
    void teardown(test::TestBackend& b) override {
        DenseCase::teardown(b);
        layer_.reset();
    }
    Cost cost() const override {
        double c = 0, f = 0;
        for (int m : ms_) {
            c += double(m) * k_ * 2 + double(n_) * k_ * 2 + double(m) * n_ * (out_ == jit::LinearOut::f32 ? 4 : 2);
            f += 2.0 * m * n_ * k_;
        }
        return {c, f};
    }

private:
    std::vector<int> ms_;
    int64_t n_, k_;
    jit::LinearOut out_;
    uint64_t seed_;
    std::vector<uint16_t> x_, w_;
    std::vector<double> ref_;
    std::unique_ptr<model::layers::Linear> layer_;
    std::vector<model::layers::LinearPlan> plans_;
    runtime::Buffer x_d_, w_d_, y_d_;
};

}  // namespace

void add_linear_layer_cases(CaseList& out) {
    out.push_back(std::make_unique<LinearLayerCase>(std::vector<int>{1, 33, 150}, 512, 2048, jit::LinearOut::bf16, 1200));
    out.push_back(std::make_unique<LinearLayerCase>(std::vector<int>{4, 70}, 896, 7168, jit::LinearOut::f32, 1210));
}

}  // namespace kiln::ops
