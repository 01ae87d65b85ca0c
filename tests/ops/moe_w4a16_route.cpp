// Op cases of family moe_w4a16_route: the m-blocks the GEMMs read (each local expert's rows in slot order,
// m-block experts and row counts, sorted tokens and weights, -1 / 0 padding), with slots of other ranks
// (ids below 0 or past the experts) skipped and m-blocks past the capacity dropped (their entries untouched),
// for every block_m. The host keeps each expert's rows in slot order; the device's order inside an expert is
// unspecified, so there they are compared as a set.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "jit/families/moe_w4a16_route.hpp"
#include "tests/common/tensors.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/moe_w4a16_problem.hpp"

namespace kiln::ops {

namespace {

class RouteCase final : public OpCase {
public:
    RouteCase(int block_m, int cap_cut) : bm_(block_m), cap_cut_(cap_cut) {
        tokens_ = bm_ >= 64 ? 301 : 57;
        r_ = moe_test::make_routing("skewed", tokens_, k_topk, k_experts, 9 + bm_);
        for (size_t i = 0; i < r_.ids.size(); i += 5) r_.ids[i] = (i / 5) % 2 ? -1 : k_experts + 3;  // other ranks
        for (int slot = 0; slot < tokens_ * k_topk; ++slot) {
            const int e = r_.ids[slot];
            if (e >= 0 && e < k_experts) want_[e].push_back({slot / k_topk, r_.weights[slot]});
        }
        for (auto& [e, v] : want_) blocks_ += (static_cast<int>(v.size()) + bm_ - 1) / bm_;
    }
    std::string family() const override { return "moe_w4a16_route"; }
    std::string name() const override {
        return fmt::format("moe_w4a16_route: block_m {}, {} tokens, capacity {}", bm_, tokens_,
                           cap_cut_ ? "cut by 3 m-blocks" : "exact");
    }
    bool runs_on(const test::TestBackend& b) const override {
        return bm_ <= 64 || b.backend->kind() == runtime::BackendKind::cuda;
    }
    void setup(test::TestBackend& b) override {
        kernel_ = &b.disp->get(jit::MoeW4A16RouteFamily::descriptor(k_experts, bm_, target(b)));
        runtime::Backend& be = *b.backend;
        ids_ = test::upload(be, r_.ids);
        w_ = test::upload(be, r_.weights);
        counts_ = be.alloc(k_experts * 4);
        nmb_ = be.alloc(4);
        info_ = be.alloc(size_t(blocks_) * 8);
        st_ = be.alloc(size_t(blocks_) * bm_ * 4);
        sw_ = be.alloc(size_t(blocks_) * bm_ * 4);
    }
    void poison(test::TestBackend& b) override {
        for (const runtime::Buffer* buf : {&counts_, &nmb_, &info_, &st_, &sw_}) test::poison(*b.stream, *buf);
    }
    void run(test::TestBackend& b) override {
        kiln_params::moe::RoutingParams p{};
        p.topk_ids = ids_.as<const int32_t>();
        p.topk_weights = w_.as<const float>();
        p.expert_count = counts_.as<int32_t>();
        p.num_mblocks = nmb_.as<int32_t>();
        p.mblock_info = info_.as<kiln_params::i32x2>();
        p.sorted_token = st_.as<int32_t>();
        p.sorted_weight = sw_.as<float>();
        p.num_tokens = tokens_;
        p.topk = k_topk;
        p.num_experts = k_experts;
        p.mblock_cap = blocks_ - cap_cut_;
        jit::launch_moe_w4a16_route(*kernel_, *b.stream, p);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        runtime::Backend& be = *b.backend;
        const auto counts = test::download<int32_t>(be, counts_, k_experts);
        const auto nmb = test::download<int32_t>(be, nmb_, 1);
        const auto info = test::download<int32_t>(be, info_, size_t(blocks_) * 2);
        const auto st = test::download<int32_t>(be, st_, size_t(blocks_) * bm_);
        const auto sw = test::download<float>(be, sw_, size_t(blocks_) * bm_);
        const int cap = blocks_ - cap_cut_;
        if (nmb[0] != cap) bad.push_back(fmt::format("{} m-blocks, expected {}", nmb[0], cap));
        const bool ordered = be.kind() == runtime::BackendKind::host;
        long wrong = 0;
        int mb = 0;
        for (int e = 0; e < k_experts; ++e) {
            std::vector<std::pair<int, float>> rows = want_[e], got;
            wrong += counts[e] != static_cast<int>(rows.size());
            const bool whole = mb + (static_cast<int>(rows.size()) + bm_ - 1) / bm_ <= cap;
            for (size_t j = 0; j < rows.size(); j += bm_, ++mb) {
                if (mb >= cap) continue;  // dropped past the capacity
                wrong += info[2 * mb] != e;
                wrong += info[2 * mb + 1] != static_cast<int>(std::min<size_t>(bm_, rows.size() - j));
                for (int i = 0; i < bm_; ++i) {
                    const size_t row = size_t(mb) * bm_ + i;
                    if (j + i < rows.size()) got.push_back({st[row], sw[row]});
                    else wrong += st[row] != -1 || sw[row] != 0.0f;
                }
            }
            if (!whole) {  // an expert cut by the capacity: the device leaves unspecified which rows survive
                if (ordered) wrong += !std::equal(got.begin(), got.end(), rows.begin());
                continue;
            }
            if (!ordered) {
                std::sort(rows.begin(), rows.end());
                std::sort(got.begin(), got.end());
            }
            wrong += got != rows;
        }
        if (wrong) bad.push_back(fmt::format("{} counts, m-block entries or sorted rows differ", wrong));
        long past = 0;  // m-block entries past the capacity keep the poison (-1)
        for (size_t i = size_t(cap) * 2; i < info.size(); ++i) past += info[i] != -1;
        if (past) bad.push_back(fmt::format("{} m-block entries written past the capacity", past));
        return bad;
    }
    void teardown(test::TestBackend&) override {
        for (runtime::Buffer* buf : {&ids_, &w_, &counts_, &nmb_, &info_, &st_, &sw_}) buf->reset();
    }
    Cost cost() const override { return {double(tokens_) * k_topk * 16, 0}; }

private:
    static jit::Target target(const test::TestBackend& b) {
        return b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
    }
    static constexpr int k_experts = 24, k_topk = 6;
    int bm_, cap_cut_, tokens_ = 0, blocks_ = 0;
    moe_test::Routing r_;
    std::map<int, std::vector<std::pair<int, float>>> want_;  // expert -> (token, weight) in slot order
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer ids_, w_, counts_, nmb_, info_, st_, sw_;
};

}  // namespace

void add_moe_w4a16_route_cases(CaseList& out) {
    for (int bm : {8, 16, 32, 64, 128, 192})
        for (int cut : {0, 3}) out.push_back(std::make_unique<RouteCase>(bm, cut));
}

}  // namespace kiln::ops
