// Op cases of family moe_routing: flat rows grouped by expert (stable), padded to block_m with the
// sentinel, block experts, counts and the padded total against moe_routing_reference, with ids of other
// ranks dropped, capacities larger than needed (the tail must be filled too), inputs over one slice, every
// token on the same experts, and the device kernel's CTA sizes (warps) chosen or by default.
#include <random>

#include <fmt/format.h>

#include "jit/families/moe_routing.hpp"
#include "tests/common/tensors.hpp"
#include "tests/ops/cases.hpp"

namespace kiln::ops {

namespace {

using runtime::DType;

struct RoutingShape {
    int tokens, experts, topk, block_m;
    double invalid_fraction;  // ids outside [0, experts): dropped
    int64_t extra_capacity;   // sorted_ids / block_expert larger than needed
    int warps = 0;            // the device CTA's warps (0: the family's default for the expert count)
    bool one_hot = false;     // every token on experts 0 .. topk-1
};

class RoutingCase final : public OpCase {
public:
    RoutingCase(RoutingShape s, uint64_t seed) : s_(s) {
        std::mt19937_64 rng(seed);
        ids_.resize(size_t(s.tokens) * s.topk);
        // Skewed routing: half the picks go to a few hot experts.
        std::uniform_int_distribution<int> any(0, s.experts - 1), hot(0, std::min(3, s.experts - 1));
        std::uniform_real_distribution<double> u(0, 1);
        for (size_t i = 0; i < ids_.size(); ++i) {
            int32_t& id = ids_[i];
            if (s.one_hot) id = static_cast<int32_t>(i % s.topk);
            else if (u(rng) < s.invalid_fraction)
                id = (rng() & 1) ? -1 - static_cast<int>(rng() % 5) : s.experts + static_cast<int>(rng() % 7);
            else id = u(rng) < 0.5 ? hot(rng) : any(rng);
        }
        cap_ = jit::moe_routing_capacity(s.tokens, s.topk, s.experts, s.block_m) + s.extra_capacity;
        blocks_ = cap_ / s.block_m + s.extra_capacity;
        ref_ = jit::moe_routing_reference(ids_, s.tokens, s.topk, s.experts, s.block_m, cap_, blocks_);
    }
    std::string family() const override { return "moe_routing"; }
    std::string name() const override {
        return fmt::format(
            "moe_routing: {} tokens, {} experts, top-{}, block_m {}, {}, +{} rows{}", s_.tokens, s_.experts, s_.topk,
            s_.block_m, s_.one_hot ? std::string("one-hot") : fmt::format("{:.0f}% foreign", 100 * s_.invalid_fraction),
            s_.extra_capacity, s_.warps ? fmt::format(", warps {}", s_.warps) : std::string());
    }
    void setup(test::TestBackend& b) override {
        const jit::Target t =
            b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
        kernel_ = &b.disp->get(jit::MoeRoutingFamily::descriptor(s_.experts, s_.topk, t, s_.block_m, s_.warps));
        runtime::Backend& be = *b.backend;
        ids_d_ = test::upload(be, ids_);
        sorted_ = be.alloc(size_t(cap_) * 4);
        block_ = be.alloc(size_t(blocks_) * 4);
        counts_ = be.alloc(size_t(s_.experts) * 4);
        total_ = be.alloc(4);
    }
    void poison(test::TestBackend& b) override {
        for (const runtime::Buffer* buf : {&sorted_, &block_, &counts_, &total_}) test::poison(*b.stream, *buf);
    }
    void run(test::TestBackend& b) override {
        jit::MoeRoutingArgs a{ids_d_.view(DType::i32, {s_.tokens, s_.topk}), sorted_.view(DType::i32, {cap_}),
                              block_.view(DType::i32, {blocks_}), counts_.view(DType::i32, {s_.experts}),
                              total_.view(DType::i32, {1})};
        jit::launch_moe_routing(*kernel_, *b.stream, a);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        runtime::Backend& be = *b.backend;
        std::vector<std::string> bad;
        if (test::download<int32_t>(be, total_, 1)[0] != ref_.total_padded) bad.push_back("total_padded differs");
        if (test::download<int32_t>(be, counts_, s_.experts) != ref_.tokens_per_expert)
            bad.push_back("tokens_per_expert differs");
        if (test::download<int32_t>(be, sorted_, cap_) != ref_.sorted_ids) bad.push_back("sorted_ids differ");
        if (test::download<int32_t>(be, block_, blocks_) != ref_.block_expert) bad.push_back("block_expert differs");
        return bad;
    }
    void teardown(test::TestBackend&) override {
        for (runtime::Buffer* buf : {&ids_d_, &sorted_, &block_, &counts_, &total_}) buf->reset();
    }
    Cost cost() const override { return {double(ids_.size()) * 8 + double(cap_) * 4, 0}; }

private:
    RoutingShape s_;
    std::vector<int32_t> ids_;
    int64_t cap_ = 0, blocks_ = 0;
    jit::MoeRoutingResult ref_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer ids_d_, sorted_, block_, counts_, total_;
};

}  // namespace

void add_moe_routing_cases(CaseList& out) {
    const RoutingShape shapes[] = {
        {1, 1, 1, 1, 0.0, 0},       {1, 8, 2, 64, 0.0, 0},     {3, 7, 3, 5, 0.2, 3},
        {17, 64, 8, 16, 0.05, 0},   {33, 257, 16, 64, 0.1, 9}, {1000, 384, 8, 64, 0.0, 0},
        {3000, 896, 16, 128, 0.01, 130}, {5000, 64, 6, 7, 0.02, 0},  // > 4096 rows: several host slices
        {777, 2, 2, 1, 0.3, 1},
        // the same kernel at several token counts (M is not baked in)
        {1, 96, 8, 32, 0.02, 0},    {9, 96, 8, 32, 0.02, 0},   {4097, 96, 8, 32, 0.02, 0},
        // decode and prefill sizes of K2 / K3 and the device CTA's sizes: 32 warps (up to 512 experts), 16 (896
        // experts), 8 (2048), or chosen
        {50, 112, 16, 8, 0.0, 0},   {2048, 384, 8, 64, 0.0, 0}, {300, 2048, 4, 32, 0.0, 0},
        {257, 64, 8, 16, 0.0, 0, 4}, {16384, 384, 8, 64, 0.0, 0, 32},
        {20, 64, 8, 16, 0.0, 0, 0, true}, {3, 8, 2, 4, 0.0, 0, 0, true},
    };
    uint64_t seed = 1;
    for (const RoutingShape& s : shapes) out.push_back(std::make_unique<RoutingCase>(s, seed++));
}

}  // namespace kiln::ops
