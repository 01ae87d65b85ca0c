// Op cases of family glu against model/reference/situ (fp64): SiLU-GLU and SiTU-GLU over a fused
// [gate | up] matrix at the K3 widths (gates wide enough to reach the β = 4 cap, ups the β_lin = 25 cap),
// SiTU with the up branch uncapped, strided inputs, and the sigmoid output gate. Tolerance: bf16 outputs,
// relative L2 error 4e-3.
#include <cmath>

#include <fmt/format.h>

#include "jit/families/glu.hpp"
#include "model/reference/situ.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;
using jit::GluMode;

constexpr double k_bound = 4e-3;

struct GluShape {
    GluMode mode;
    int rows, cols;
    int pad = 0;               // extra elements at the end of every input row (a strided view)
    float linear_beta = 25.0f; // situ; <= 0: uncapped
    int threads = 0;
};

class GluCase final : public DenseCase {
public:
    GluCase(GluShape s, uint64_t seed) : s_(s), seed_(seed) {}
    // Inputs and the reference, once, on first use (constructing the case list stays cheap).
    void prepare(uint64_t seed) {
        const GluShape& s = s_;
        const int in_cols = s.mode == GluMode::sigmoid_gate ? s.cols : 2 * s.cols;
        in_stride_ = in_cols + s.pad;
        in_ = test::random_bf16(size_t(s.rows) * in_stride_, seed, 3.0f);
        gate_ = test::random_bf16(size_t(s.rows) * in_stride_, seed + 1, 2.0f);
        // Ups of SiTU reach past the linear cap.
        if (s.mode == GluMode::situ)
            for (int r = 0; r < s.rows; ++r)
                for (int c = 0; c < s.cols; ++c) {
                    uint16_t& u = in_[size_t(r) * in_stride_ + s.cols + c];
                    u = runtime::float_to_bf16(runtime::bf16_to_float(u) * 12.0f);
                }
        ref_.resize(size_t(s.rows) * s.cols);
        for (int r = 0; r < s.rows; ++r)
            for (int c = 0; c < s.cols; ++c) {
                const size_t i = size_t(r) * in_stride_ + c;
                const float a = runtime::bf16_to_float(in_[i]);
                double v;
                if (s.mode == GluMode::sigmoid_gate) {
                    v = double(a) / (1.0 + std::exp(-double(runtime::bf16_to_float(gate_[i]))));
                } else {
                    const float u = runtime::bf16_to_float(in_[i + s.cols]);
                    const auto act = s.mode == GluMode::silu ? model::reference::GluActivation::silu()
                                     : s.linear_beta > 0 ? model::reference::GluActivation::situ(4.0f, s.linear_beta)
                                                         : model::reference::GluActivation::situ(4.0f, std::nullopt);
                    float o;
                    model::reference::glu(act, &a, &u, 1, &o);
                    v = o;
                }
                ref_[size_t(r) * s.cols + c] = v;
            }
    }
    std::string family() const override { return "glu"; }
    std::string name() const override {
        const char* m = s_.mode == GluMode::silu ? "silu" : s_.mode == GluMode::situ ? "situ" : "sigmoid_gate";
        return fmt::format("glu {}: [{}, {}]{}{}{}", m, s_.rows, s_.cols, s_.pad ? fmt::format(", rows +{}", s_.pad) : "",
                           s_.mode == GluMode::situ && s_.linear_beta <= 0 ? ", up uncapped" : "",
                           s_.threads ? fmt::format(", {} threads", s_.threads) : "");
    }
    void setup(test::TestBackend& b) override {
        if (!ready_) {
            prepare(seed_);
            ready_ = true;
        }
        kernel_ = &b.disp->get(jit::GluFamily::descriptor(s_.mode, target_of(b), s_.threads));
        input(in_d_, *b.backend, in_);
        input(gate_d_, *b.backend, gate_);
        output(out_d_, *b.backend, ref_.size() * 2);
    }
    void run(test::TestBackend& b) override {
        const int in_cols = s_.mode == GluMode::sigmoid_gate ? s_.cols : 2 * s_.cols;
        auto strided = [&](const runtime::Buffer& buf) {
            runtime::TensorView v = buf.view(DType::bf16, {s_.rows, in_stride_});
            v.shape[1] = in_cols;
            return v;
        };
        jit::GluArgs a;
        a.in = strided(in_d_);
        if (s_.mode == GluMode::sigmoid_gate) a.gate = strided(gate_d_);
        a.out = out_d_.view(DType::bf16, {s_.rows, s_.cols});
        a.beta = 4.0f;
        a.linear_beta = s_.linear_beta;
        jit::launch_glu(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        expect_within(bad, "out", test::bf16_error(test::download<uint16_t>(*b.backend, out_d_, ref_.size()), ref_),
                      k_bound);
        return bad;
    }
    Cost cost() const override { return {double(s_.rows) * s_.cols * 6, double(s_.rows) * s_.cols * 8}; }

private:
    GluShape s_;
    uint64_t seed_ = 0;
    bool ready_ = false;
    int in_stride_ = 0;
    std::vector<uint16_t> in_, gate_;
    std::vector<double> ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer in_d_, gate_d_, out_d_;
};

}  // namespace

void add_glu_cases(CaseList& out) {
    const GluShape shapes[] = {
        {GluMode::situ, 1, 3072},  {GluMode::situ, 13, 3072},     {GluMode::situ, 4, 768, 0, -1.0f},
        {GluMode::situ, 3, 4224, 16, 25.0f, 64},                 // the dense layer's TP8 slice, strided
        {GluMode::silu, 7, 1024},  {GluMode::silu, 2, 1000, 8},
        {GluMode::sigmoid_gate, 5, 12 * 128}, {GluMode::sigmoid_gate, 3, 1536, 24, 25.0f, 128},
    };
    uint64_t seed = 300;
    for (const GluShape& s : shapes) out.push_back(std::make_unique<GluCase>(s, seed += 10));
}

}  // namespace kiln::ops
