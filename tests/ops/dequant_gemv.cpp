// Op cases of family dequant_gemv: y = x W^T for INT4 group-32 weights against the fp64 reference, within the
// bf16 output rounding plus the fp32 accumulation bound, with a poisoned row past m left untouched; m below
// the bucket, N not a multiple of the device CTA's rows, and the CTA's warps chosen or by default.
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "jit/families/dequant_gemv.hpp"
#include "tests/common/tensors.hpp"
#include "tests/ops/cases.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;
constexpr uint16_t k_poison_bf16 = 0xFFFF;

struct GemvShape {
    int m_bucket, m, n, k;
    int warps = 0;  // output rows per device CTA (0: the family's default)
};

class GemvCase final : public OpCase {
public:
    GemvCase(GemvShape s, uint64_t seed) : s_(s) {
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<float> xd(-2.f, 2.f), sd(0.002f, 0.05f);
        x_.resize(size_t(s.m) * s.k);
        scale_.resize(size_t(s.n) * (s.k / 32));
        packed_.resize(size_t(s.n) * (s.k / 8));
        for (auto& v : x_) v = runtime::float_to_bf16(xd(rng));
        for (auto& v : scale_) v = runtime::float_to_bf16(sd(rng) * ((rng() & 7) == 0 ? -1.f : 1.f));
        for (auto& w : packed_) w = static_cast<int32_t>(static_cast<uint32_t>(rng()));
    }
    std::string family() const override { return "dequant_gemv"; }
    std::string name() const override {
        return fmt::format("dequant_gemv: m {} of bucket {}, n {}, k {}{}", s_.m, s_.m_bucket, s_.n, s_.k,
                           s_.warps ? fmt::format(", warps {}", s_.warps) : std::string());
    }
    void setup(test::TestBackend& b) override {
        if (ref_.empty()) reference();
        const jit::Target t =
            b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
        kernel_ = &b.disp->get(jit::DequantGemvFamily::descriptor(s_.m_bucket, s_.n, s_.k, t, s_.warps));
        runtime::Backend& be = *b.backend;
        x_d_ = test::upload(be, x_);
        packed_d_ = test::upload(be, packed_);
        scale_d_ = test::upload(be, scale_);
        y_ = be.alloc(size_t(s_.m + 1) * s_.n * 2);  // one row more than m: it must stay untouched
    }
    void poison(test::TestBackend& b) override { test::poison(*b.stream, y_); }
    void run(test::TestBackend& b) override {
        jit::DequantGemvArgs a{x_d_.view(DType::bf16, {s_.m, s_.k}), packed_d_.view(DType::i32, {s_.n, s_.k / 8}),
                               scale_d_.view(DType::bf16, {s_.n, s_.k / 32}), y_.view(DType::bf16, {s_.m, s_.n})};
        jit::launch_dequant_gemv(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const auto y = test::download<uint16_t>(*b.backend, y_, size_t(s_.m + 1) * s_.n);
        long bad = 0, touched = 0;
        for (size_t i = 0; i < ref_.size(); ++i) {
            const double want = ref_[i], got = runtime::bf16_to_float(y[i]);
            // bf16 output rounding (2^-8 relative) + fp32 accumulation over K terms
            const double tol = std::ldexp(std::fabs(want), -8) + 1e-6 * mag_[i] + 1e-30;
            bad += !(std::fabs(got - want) <= tol);
        }
        for (int n = 0; n < s_.n; ++n) touched += y[size_t(s_.m) * s_.n + n] != k_poison_bf16;
        std::vector<std::string> out;
        if (bad) out.push_back(fmt::format("{} of {} outputs outside the bound", bad, ref_.size()));
        if (touched) out.push_back(fmt::format("{} outputs written past row m", touched));
        return out;
    }
    void teardown(test::TestBackend&) override {
        for (runtime::Buffer* buf : {&x_d_, &packed_d_, &scale_d_, &y_}) buf->reset();
    }
    Cost cost() const override {
        return {double(s_.n) * s_.k / 2 + double(s_.n) * s_.k / 16 + double(s_.m) * (s_.k + s_.n) * 2,
                2.0 * s_.m * s_.n * s_.k};
    }

private:
    // The fp64 reference and the magnitude of its terms (which bounds the fp32 accumulation error), made when
    // the case first runs.
    void reference() {
        const GemvShape& s = s_;
        ref_ = jit::dequant_gemv_reference(x_, s.m, packed_, scale_, s.n, s.k);
        mag_.assign(size_t(s.m) * s.n, 0.0);
        for (int r = 0; r < s.m; ++r)
            for (int n = 0; n < s.n; ++n)
                for (int kk = 0; kk < s.k; ++kk) {
                    const uint32_t word = static_cast<uint32_t>(packed_[size_t(n) * (s.k / 8) + kk / 8]);
                    const int code = static_cast<int>((word >> (4 * (kk % 8))) & 0xfu) - 8;
                    mag_[size_t(r) * s.n + n] +=
                        std::fabs(code * runtime::bf16_to_float(scale_[size_t(n) * (s.k / 32) + kk / 32]) *
                                  runtime::bf16_to_float(x_[size_t(r) * s.k + kk]));
                }
    }

    GemvShape s_;
    std::vector<uint16_t> x_, scale_;
    std::vector<int32_t> packed_;
    std::vector<double> ref_, mag_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer x_d_, packed_d_, scale_d_, y_;
};

}  // namespace

void add_dequant_gemv_cases(CaseList& out) {
    const GemvShape shapes[] = {
        {1, 1, 1, 32},     {1, 1, 7, 96},      {2, 2, 33, 64},     {3, 2, 65, 160},  {4, 4, 128, 512},
        {8, 5, 257, 1056}, {16, 16, 64, 256},  {16, 9, 301, 4128}, {1, 1, 2048, 7168},
        // N not a multiple of the CTA's rows, a K2 gate_up-like shape, every warp count
        {4, 3, 1000, 2048}, {8, 8, 4096, 7168, 4}, {16, 16, 512, 4096, 16}, {2, 2, 7, 32, 1},
    };
    uint64_t seed = 100;
    for (const GemvShape& s : shapes) out.push_back(std::make_unique<GemvCase>(s, seed++));
}

}  // namespace kiln::ops
