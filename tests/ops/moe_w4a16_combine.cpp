// Op cases of family moe_w4a16_combine: each token's local rows summed at their slot positions (plain rows,
// or the warp-specialised down's tiles of 64 columns), rows of other ranks' slots never read (they are NaN
// here), fp32 with one bf16 rounding.
#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "jit/families/moe_w4a16_combine.hpp"
#include "tests/common/tensors.hpp"
#include "tests/ops/cases.hpp"

namespace kiln::ops {

namespace {

using runtime::bf16_to_float;
using runtime::float_to_bf16;

class CombineCase final : public OpCase {
public:
    explicit CombineCase(int row_tile) : row_tile_(row_tile) {
        std::mt19937 rng(11);
        std::uniform_real_distribution<float> u(0.05f, 1.0f);
        // Sorted positions: a permutation of the rows; every seventh slot belongs to another rank (-1).
        pos_.resize(k_slots);
        for (int i = 0; i < k_slots; ++i) pos_[i] = i;
        std::shuffle(pos_.begin(), pos_.end(), rng);
        for (int i = 0; i < k_slots; i += 7) pos_[i] = -1;
        const uint16_t nan = 0x7FC0;
        const size_t rows = row_tile_ ? size_t((k_slots + row_tile_ - 1) / row_tile_) * row_tile_ : size_t(k_slots);
        rows_.assign(rows * k_stride, nan);
        std::vector<uint16_t> by_slot(size_t(k_slots) * k_stride, nan);
        for (int i = 0; i < k_slots; ++i) {
            if (pos_[i] < 0) continue;  // its rows stay NaN: never read
            for (int c = 0; c < k_n; ++c) {
                const uint16_t v = float_to_bf16((rng() & 1 ? 1.0f : -1.0f) * u(rng));
                by_slot[size_t(i) * k_stride + c] = v;
                rows_[offset(pos_[i], c)] = v;
            }
        }
        want_.assign(size_t(k_tokens) * k_n, 0.0);
        for (int t = 0; t < k_tokens; ++t)
            for (int j = 0; j < k_topk; ++j)
                if (pos_[t * k_topk + j] >= 0)
                    for (int c = 0; c < k_n; ++c)
                        want_[size_t(t) * k_n + c] += bf16_to_float(by_slot[size_t(t * k_topk + j) * k_stride + c]);
    }
    std::string family() const override { return "moe_w4a16_combine"; }
    std::string name() const override {
        return fmt::format("moe_w4a16_combine: {} tokens, top-{}, rows {}", k_tokens, k_topk,
                           row_tile_ ? fmt::format("in tiles of {}", row_tile_) : std::string("plain"));
    }
    void setup(test::TestBackend& b) override {
        const jit::Target t =
            b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
        kernel_ = &b.disp->get(jit::MoeW4A16CombineFamily::descriptor(t));
        rows_d_ = test::upload(*b.backend, rows_);
        pos_d_ = test::upload(*b.backend, pos_);
        out_ = b.backend->alloc(size_t(k_tokens) * k_n * 2);
    }
    void poison(test::TestBackend& b) override { test::poison(*b.stream, out_); }
    void run(test::TestBackend& b) override {
        kiln_params::moe::CombineParams p{};
        p.rows = rows_d_.as<const uint16_t>();
        p.rows_stride = k_stride;
        p.slot_pos = pos_d_.as<const int32_t>();
        p.num_tokens = k_tokens;
        p.topk = k_topk;
        p.n = k_n;
        p.out = out_.as<uint16_t>();
        p.out_stride = k_n;
        p.row_tile = row_tile_;
        jit::launch_moe_w4a16_combine(*kernel_, *b.stream, p);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const auto out = test::download<uint16_t>(*b.backend, out_, size_t(k_tokens) * k_n);
        long bad = 0;
        for (size_t i = 0; i < out.size(); ++i) {
            const double got = bf16_to_float(out[i]);
            if (!(std::fabs(got - want_[i]) <= 1.0 / 128 * std::fabs(want_[i]) + 1e-6)) ++bad;  // one bf16 rounding
        }
        if (bad == 0) return {};
        return {fmt::format("{} of {} outputs off by more than one bf16 rounding", bad, out.size())};
    }
    void teardown(test::TestBackend&) override {
        rows_d_.reset();
        pos_d_.reset();
        out_.reset();
    }
    Cost cost() const override { return {double(k_slots) * k_n * 2 + double(k_tokens) * k_n * 2, double(k_slots) * k_n}; }

private:
    // Tiles of row_tile rows x 64 columns, swizzled (templates/device/moe_w4a16_combine.cuh, spelled out here).
    size_t offset(int p, int c) const {
        if (!row_tile_) return size_t(p) * k_stride + c;
        const int mb = p / row_tile_, r = p % row_tile_;
        return (size_t(mb) * (k_stride / 64) + c / 64) * row_tile_ * 64 + size_t(r) * 64 +
               size_t(((c / 8) % 8) ^ (r % 8)) * 8 + c % 8;
    }
    static constexpr int k_tokens = 37, k_topk = 5, k_n = 300, k_stride = 320, k_slots = k_tokens * k_topk;
    int row_tile_;
    std::vector<int32_t> pos_;
    std::vector<uint16_t> rows_;
    std::vector<double> want_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer rows_d_, pos_d_, out_;
};

}  // namespace

void add_moe_w4a16_combine_cases(CaseList& out) {
    out.push_back(std::make_unique<CombineCase>(0));
    out.push_back(std::make_unique<CombineCase>(24));
}

}  // namespace kiln::ops
