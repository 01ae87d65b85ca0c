// Op cases of family router against model/reference/latent_moe route() (fed the logits through an
// identity gate, so its fp64 matmul is exact): K3 (896 experts, top-16, bias), Kimi-Linear-48B (256,
// top-8, scaling 2.446), no bias and no renormalisation. The biased scores are built on a grid 1e-3 apart
// so the choice has no near-ties an fp32 sigmoid could reorder; the bias is large enough to change the
// choice against the unbiased top-k. Ids and their order must match exactly; weights within 1e-5 relative.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "jit/families/router.hpp"
#include "model/reference/latent_moe.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/dense_case.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;

struct RouteShape {
    int rows, experts, topk;
    bool bias = true;
    bool renormalize = true;
    float scale = 1.0f;
    int warps = 0;
};

class RouterCase final : public DenseCase {
public:
    RouterCase(RouteShape s, uint64_t seed) : s_(s), seed_(seed) {}
    // Inputs and the reference, once, on first use (constructing the case list stays cheap).
    void prepare(uint64_t seed) {
        const RouteShape& s = s_;
        std::mt19937_64 rng(seed);
        const int E = s.experts;
        logits_.resize(size_t(s.rows) * E);
        if (s.bias) bias_ = test::random_f32(size_t(E), seed + 1, -0.04f, 0.04f);
        std::vector<int> perm(static_cast<size_t>(E));
        for (int t = 0; t < s.rows; ++t) {
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int e = 0; e < E; ++e) {
                const double choice = 0.05 + 0.9 * double(perm[size_t(e)]) / E;  // distinct, >= 1e-3 apart
                const double sc = choice - (s.bias ? bias_[size_t(e)] : 0.0f);
                logits_[size_t(t) * E + e] = static_cast<float>(std::log(sc / (1.0 - sc)));
            }
        }
        model::reference::RouterWeights w;
        w.gate = model::reference::Matrix(size_t(E), size_t(E));
        for (int e = 0; e < E; ++e) w.gate.at(size_t(e), size_t(e)) = 1.0f;
        w.score_bias = bias_;
        model::reference::RouterConfig cfg{size_t(E), size_t(s.topk), s.renormalize, s.scale};
        ref_ = model::reference::route(w, cfg, model::reference::Matrix(size_t(s.rows), size_t(E), logits_));
    }
    std::string family() const override { return "router"; }
    std::string name() const override {
        return fmt::format("router: {} rows, {} experts, top-{}{}{}, scale {}{}", s_.rows, s_.experts, s_.topk,
                           s_.bias ? ", bias" : "", s_.renormalize ? ", renormalised" : "", s_.scale,
                           s_.warps ? fmt::format(", {} warps", s_.warps) : "");
    }
    void setup(test::TestBackend& b) override {
        if (!ready_) {
            prepare(seed_);
            ready_ = true;
        }
        kernel_ = &b.disp->get(jit::RouterFamily::descriptor(s_.experts, s_.topk, target_of(b), s_.warps));
        input(logits_d_, *b.backend, logits_);
        if (s_.bias) input(bias_d_, *b.backend, bias_);
        output(ids_d_, *b.backend, ref_.ids.size() * 4);
        output(w_d_, *b.backend, ref_.ids.size() * 4);
    }
    void run(test::TestBackend& b) override {
        jit::RouterArgs a;
        a.logits = logits_d_.view(DType::f32, {s_.rows, s_.experts});
        if (s_.bias) a.bias = bias_d_.view(DType::f32, {s_.experts});
        a.topk_ids = ids_d_.view(DType::i32, {s_.rows, s_.topk});
        a.topk_weights = w_d_.view(DType::f32, {s_.rows, s_.topk});
        a.renormalize = s_.renormalize;
        a.routed_scaling_factor = s_.scale;
        jit::launch_router(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        if (test::download<int32_t>(*b.backend, ids_d_, ref_.ids.size()) != ref_.ids) bad.push_back("topk_ids differ");
        const std::vector<double> ref(ref_.weights.begin(), ref_.weights.end());
        expect_within(bad, "topk_weights", test::f32_error(test::download<float>(*b.backend, w_d_, ref.size()), ref),
                      1e-5);
        return bad;
    }
    Cost cost() const override {
        const double n = double(s_.rows) * s_.experts;
        return {n * 4 + double(s_.rows) * s_.topk * 8, n * (4 + s_.topk)};
    }

private:
    RouteShape s_;
    uint64_t seed_ = 0;
    bool ready_ = false;
    std::vector<float> logits_, bias_;
    model::reference::Routing ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer logits_d_, bias_d_, ids_d_, w_d_;
};

}  // namespace

void add_router_cases(CaseList& out) {
    const RouteShape shapes[] = {
        {1, 896, 16},  {37, 896, 16}, {5, 256, 8, true, true, 2.446f}, {9, 64, 6, false, false, 1.0f},
        {3, 8, 2, true, true, 1.0f, 1}, {130, 896, 16, true, true, 1.0f, 8}, {2, 33, 32, false, true, 1.5f},
    };
    uint64_t seed = 900;
    for (const RouteShape& s : shapes) out.push_back(std::make_unique<RouterCase>(s, seed += 10));
}

}  // namespace kiln::ops
