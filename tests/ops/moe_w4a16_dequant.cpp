// Op cases of family moe_w4a16_dequant: the kernels' dequantisation of the decode layout, expanded to bf16,
// is bit-identical to the unfused bf16 form of the prepared weights (padding exact zeros), for both formats,
// gate_up and down matrices and every representable scale (wide MXFP4 exponents included).
#include <fmt/format.h>

#include "jit/families/moe_w4a16_dequant.hpp"
#include "model/layers/moe_w4a16.hpp"
#include "tests/common/tensors.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/moe_w4a16_problem.hpp"

namespace kiln::ops {

namespace {

namespace moe = kiln::model::weights;

class DequantCase final : public OpCase {
public:
    DequantCase(moe::W4Format f, bool gate_up) : f_(f), gate_up_(gate_up) {
        n_ = gate_up ? 96 : 128;
        k_ = gate_up ? 224 : 256;
        for (int p = 0; p < (gate_up ? 2 : 1); ++p) m_.push_back(moe_test::random_matrix(f, n_, k_, 100 + p, true));
        w_ = moe::prepare_moe_weights(f, moe::W4Layout::decode_mma16, gate_up, 1, n_, k_,
                                      [&](int, int p) { return m_[p].view(); });
    }
    std::string family() const override { return "moe_w4a16_dequant"; }
    std::string name() const override {
        return fmt::format("moe_w4a16_dequant: {} {}, any scale", moe::to_string(f_), gate_up_ ? "gate_up" : "down");
    }
    void setup(test::TestBackend& b) override {
        const jit::Target t =
            b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
        kernel_ = &b.disp->get(jit::MoeW4A16DequantFamily::descriptor(model::layers::matrix_shape(w_), t));
        weights_ = runtime::upload_buffer(*b.backend, w_.bytes.data(), w_.bytes.size());
        out_ = b.backend->alloc(size_t(w_.n_pad) * w_.k_pad * 2);
    }
    void poison(test::TestBackend& b) override { test::poison(*b.stream, out_); }
    void run(test::TestBackend& b) override {
        jit::launch_moe_w4a16_dequant(*kernel_, *b.stream,
                                      {weights_.as<const uint8_t>(), out_.as<uint16_t>(), w_.n_pad, w_.k_pad});
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const auto got = test::download<uint16_t>(*b.backend, out_, size_t(w_.n_pad) * w_.k_pad);
        const long bad = moe_test::dequant_mismatches(w_, n_, k_, got);
        if (bad == 0) return {};
        return {fmt::format("{} elements differ from the unfused bf16 form (wide scales: {})", bad, w_.wide_scales)};
    }
    void teardown(test::TestBackend&) override {
        weights_.reset();
        out_.reset();
    }
    Cost cost() const override { return {double(w_.bytes.size()) + double(w_.n_pad) * w_.k_pad * 2, 0}; }

private:
    moe::W4Format f_;
    bool gate_up_;
    int n_ = 0, k_ = 0;
    std::vector<moe_test::CheckpointBytes> m_;
    moe::PreparedMoeWeights w_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer weights_, out_;
};

}  // namespace

void add_moe_w4a16_dequant_cases(CaseList& out) {
    for (auto f : {moe::W4Format::int4_g32_bf16, moe::W4Format::mxfp4_g32_e8m0})
        for (bool gate_up : {false, true}) out.push_back(std::make_unique<DequantCase>(f, gate_up));
}

}  // namespace kiln::ops
