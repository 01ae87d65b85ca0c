// Op cases of family linear against an fp64 GEMM over the same bf16 inputs: decode and prefill rows at the
// K3 TP8 shapes (hidden 7168), fp32 outputs (router logits, an lm_head slice), ragged M, N and a K that is
// not a multiple of the 32-wide K step (zero-filled tail), and the device tiles (block_m x block_n with
// their warps; the host target has one kernel per output type). Tolerance: relative L2 error 4e-3 for bf16
// outputs (one rounding), 1e-5 for fp32 outputs (fp32 accumulation over K <= 7168 of O(1) terms).
#include <fmt/format.h>

#include "jit/families/linear.hpp"
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
