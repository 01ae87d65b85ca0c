#include "tests/ops/moe_w4a16_layer_case.hpp"

#include <atomic>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_decode_fused.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "model/layers/moe_w4a16.hpp"
#include "tests/common/tensors.hpp"
#include "tests/common/tolerance.hpp"

namespace kiln::ops::moe_test {

namespace {

using autotune::SchedulePick;
using model::layers::MoeW4A16;
using model::layers::MoeW4A16Path;
using F = moe::W4Format;
constexpr MoeActivation silu = MoeActivation::silu_glu, situ = MoeActivation::situ_glu;

void parallel_experts(int n, const std::function<void(int)>& f) {
    std::atomic<int> next{0};
    const int nt = std::max(1, std::min<int>(n, static_cast<int>(std::thread::hardware_concurrency())));
    std::vector<std::thread> th;
    for (int i = 0; i < nt; ++i)
        th.emplace_back([&]() {
            for (int j = next.fetch_add(1); j < n; j = next.fetch_add(1)) f(j);
        });
    for (auto& t : th) t.join();
}

// A problem's data, made on first use and shared by its configurations; its copies in each backend's
// memory are dropped when the last configuration that uses them tears down.
struct SharedProblem {
    MoeSpec spec;
    std::unique_ptr<Problem> pb;
    struct OnBackend {
        runtime::Buffer gu, dn, x, ids, w;
        int users = 0;
    };
    std::map<const test::TestBackend*, OnBackend> on;

    const Problem& data() {
        if (!pb) {
            const uint64_t seed = std::hash<std::string>{}(spec.name) & 0xFFFFFF;
            pb = std::make_unique<Problem>(make_problem(spec.fmt, spec.act, spec.experts, spec.hidden, spec.inter,
                                                        spec.routing, spec.tokens, spec.topk, seed, parallel_experts));
        }
        return *pb;
    }
    OnBackend& acquire(test::TestBackend& b) {
        OnBackend& o = on[&b];
        if (o.users++ == 0) {
            const Problem& p = data();
            runtime::Backend& be = *b.backend;
            o.gu = runtime::upload_buffer(be, p.wgu.bytes.data(), p.wgu.bytes.size());
            o.dn = runtime::upload_buffer(be, p.wdn.bytes.data(), p.wdn.bytes.size());
            o.x = test::upload(be, p.x);
            o.ids = test::upload(be, p.routing.ids);
            o.w = test::upload(be, p.routing.weights);
        }
        return o;
    }
    void release(test::TestBackend& b) {
        auto it = on.find(&b);
        if (it != on.end() && --it->second.users == 0) on.erase(it);
    }
};

class LayerCase final : public OpCase {
public:
    LayerCase(std::string family, std::shared_ptr<SharedProblem> p, MoeLayerConfig cfg)
        : family_(std::move(family)), p_(std::move(p)), cfg_(std::move(cfg)) {
        tuning_ = autotune::default_moe_w4a16_tuning(p_->spec.fmt);
        cfg_.apply(tuning_);
        tuning_.tiles = p_->spec.tiles;
    }

    std::string family() const override { return family_; }
    std::string name() const override { return fmt::format("{}: {} / {}", family_, p_->spec.name, cfg_.name); }
    bool runs_on(const test::TestBackend& b) const override {
        return !cfg_.device_only || b.backend->kind() == runtime::BackendKind::cuda;
    }
    bool quick() const override { return cfg_.quick; }

    void setup(test::TestBackend& b) override {
        const MoeSpec& s = p_->spec;
        const Problem& pb = p_->data();
        SharedProblem::OnBackend& on = p_->acquire(b);
        model::layers::MoeW4A16Shape shape;
        shape.act = s.act;
        shape.topk = s.topk;
        shape.max_tokens = s.tokens * cfg_.max_tokens_factor;
        layer_ = std::make_unique<MoeW4A16>(*b.disp, *b.backend, pb.wgu, pb.wdn, shape, tuning_);
        plan_ = layer_->plan(s.tokens);
        out_ = b.backend->alloc(size_t(s.tokens) * s.hidden * 2);
        const int64_t m = s.tokens;
        t_.gate_up = on.gu.addr();
        t_.down = on.dn.addr();
        t_.x = on.x.view(runtime::DType::bf16, {m, s.hidden});
        t_.topk_ids = on.ids.view(runtime::DType::i32, {m, s.topk});
        t_.topk_weights = on.w.view(runtime::DType::f32, {m, s.topk});
        t_.out = out_.view(runtime::DType::bf16, {m, s.hidden});
        first_.clear();
    }
    void poison(test::TestBackend& b) override { test::poison(*b.stream, out_); }
    void run(test::TestBackend& b) override { layer_->run(plan_, t_, *b.stream); }

    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<std::string> bad;
        const MoeSpec& s = p_->spec;
        const Problem& pb = p_->data();
        const std::vector<uint16_t> got = test::download<uint16_t>(*b.backend, out_, size_t(s.tokens) * s.hidden);
        const test::OutputError err = test::bf16_error(got, pb.ref);
        if (!err.within(1e-2)) bad.push_back("output: " + err.describe());
        if (err.den == 0 && err.num != 0) bad.push_back("no local expert: the output is not exactly zero");
        // the fused and the rows paths sum each token's rows in slot order: the same bits on every call, unless
        // a dynamic gate_up splits K (its partial sums meet in arrival order)
        const bool splits = plan_.gate_up_dynamic && tuning_.gate_up_k_chunk != 0;
        if (plan_.rows() && plan_.path != MoeW4A16Path::prefill && !splits) {
            if (first_.empty()) first_ = got;
            else if (got != first_) bad.push_back("two runs of a deterministic path differ");
        }
        for (std::string& m : plan_problems(b)) bad.push_back(std::move(m));
        return bad;
    }

    void teardown(test::TestBackend& b) override {
        layer_.reset();
        out_.reset();
        p_->release(b);
    }

    Cost cost() const override {
        const MoeSpec& s = p_->spec;
        const Problem& pb = p_->data();
        std::vector<char> active(s.experts, 0);
        int64_t slots = 0;
        for (int32_t e : pb.routing.ids)
            if (e >= 0 && e < s.experts) active[e] = 1, ++slots;
        const int64_t n_active = std::count(active.begin(), active.end(), 1);
        Cost c;
        c.bytes = double(n_active) * double(pb.wgu.expert_stride + pb.wdn.expert_stride) +
                  double(s.tokens) * s.hidden * 4 + double(s.tokens) * s.topk * 8;
        c.flops = 6.0 * double(slots) * s.inter * s.hidden;
        return c;
    }

private:
    // The plan against the rules the tuning states (autotune/heuristics/moe_w4a16.hpp).
    std::vector<std::string> plan_problems(const test::TestBackend& b) const {
        std::vector<std::string> bad;
        const MoeSpec& s = p_->spec;
        const Problem& pb = p_->data();
        const bool device = b.backend->kind() == runtime::BackendKind::cuda;
        const int64_t slots = int64_t(s.tokens) * s.topk;
        const bool want_prefill = tuning_.prefill_min >= 0 && slots >= tuning_.prefill_min * s.experts;
        auto expect = [&](bool ok, std::string what) {
            if (!ok) bad.push_back("plan: " + what);
        };
        expect((plan_.path == MoeW4A16Path::prefill) == want_prefill,
               fmt::format("path {} (prefill expected: {})", model::layers::to_string(plan_.path), want_prefill));
        if (want_prefill) {
            const bool wgmma = device && tuning_.prefill_wgmma && jit::moe::has_wgmma(b.disp->device_target());
            const double rows_e = double(slots) / s.experts;
            const int want_bm = tuning_.prefill_block_m ? tuning_.prefill_block_m
                                : !wgmma || rows_e < 80  ? 64
                                : 1.1 * rows_e <= 128    ? 128
                                                         : 192;
            expect(plan_.block_m == want_bm, fmt::format("prefill block_m {} (expected {})", plan_.block_m, want_bm));
            // both GEMMs are the prefill family's, gate_up then down, with the routing's block_m
            for (const jit::LoadedKernel* k : {plan_.gate_up, plan_.down}) {
                const auto cfg = k->desc.config.as<jit::MoeW4A16PrefillConfig>();
                const auto matrix = k == plan_.gate_up ? jit::moe::Matrix::gate_up : jit::moe::Matrix::down;
                expect(k->desc.family.view() == jit::MoeW4A16PrefillFamily::k_name &&
                           cfg.matrix == static_cast<uint8_t>(matrix) && cfg.block_m == want_bm &&
                           (cfg.mma == 1) == wgmma,
                       fmt::format("prefill {} kernel {}", k == plan_.gate_up ? "gate_up" : "down", k->name));
            }
            expect(plan_.route->desc.config.as<jit::MoeW4A16RouteConfig>().block_m == want_bm,
                   fmt::format("prefill routing kernel {}", plan_.route->name));
            expect(plan_.combine != nullptr, "the prefill path without a combine");
            return bad;
        }
        if (plan_.path != MoeW4A16Path::fused) {
            // the unfused decode path: down's rows + combine from rows_combine_min routed slots, else fp32 atomics
            const bool want_rows = tuning_.rows_combine_min >= 0 && slots >= tuning_.rows_combine_min;
            expect(
                (plan_.path == MoeW4A16Path::decode_rows) == want_rows,
                fmt::format("path {} (rows + combine expected: {})", model::layers::to_string(plan_.path), want_rows));
            const auto gu = plan_.gate_up->desc.config.as<jit::MoeW4A16DecodeConfig>();
            const auto dn = plan_.down->desc.config.as<jit::MoeW4A16DecodeConfig>();
            expect(plan_.gate_up->desc.family.view() == jit::MoeW4A16DecodeFamily::k_name &&
                       gu.matrix == static_cast<uint8_t>(jit::moe::Matrix::gate_up),
                   fmt::format("decode gate_up kernel {}", plan_.gate_up->name));
            expect(plan_.down->desc.family.view() == jit::MoeW4A16DecodeFamily::k_name &&
                       dn.matrix == static_cast<uint8_t>(jit::moe::Matrix::down) && dn.rows == (want_rows ? 1 : 0),
                   fmt::format("decode down kernel {}", plan_.down->name));
            expect((plan_.combine != nullptr) == want_rows, "a combine exactly on the rows path");
            if (device) {
                expect((gu.dynamic != 0) == plan_.gate_up_dynamic && (dn.dynamic != 0) == plan_.down_dynamic,
                       "the kernels' schedules are not the plan's");
            } else {
                expect(!plan_.gate_up_dynamic && !plan_.down_dynamic, "the host target runs the static schedule");
            }
        }
        if (!device) {
            expect(plan_.path != MoeW4A16Path::fused, "the host target has no fused kernel");
            return bad;
        }
        // fused unless asked not to, a schedule is static, or down's K is not a whole number of gate_up's stages,
        // and up to the slots whose routing fits the fused kernel's shared memory
        const int bk = tuning_.decode_block_k ? tuning_.decode_block_k : pb.wgu.k_pad % 128 == 0 ? 128 : 64;
        const bool fusable = pb.wdn.k_pad % bk == 0 && pb.wgu.k_pad % bk == 0;
        const bool schedules = tuning_.gate_up_schedule != SchedulePick::static_shares &&
                               tuning_.down_schedule != SchedulePick::static_shares;
        const bool may_fuse =
            tuning_.fuse && fusable && tuning_.fused_min >= 0 && slots >= tuning_.fused_min && schedules;
        expect((plan_.path == MoeW4A16Path::fused) == (may_fuse && slots <= layer_->fused_max_slots()),
               fmt::format("path {} (fused max slots {})", model::layers::to_string(plan_.path),
                           layer_->fused_max_slots()));
        // every call of these small shapes up to 2,048 slots fits the fused kernel
        if (may_fuse) expect(layer_->fused_max_slots() >= std::min<int64_t>(slots, 2048), "fused kernel too small");
        if (plan_.path == MoeW4A16Path::fused) {
            const int kg = plan_.k_groups;
            expect(kg >= 1 && kg <= tuning_.fused_k_groups, fmt::format("{} warp groups per item", kg));
            // the whole K2 and K3 shapes have the stages and the room for four groups per item
            if (s.hidden >= 3584 && s.inter >= 2048 && tuning_.fused_k_groups == 4 &&
                slots <= tuning_.fused_k_groups_max_slots)
                expect(kg == 4, fmt::format("{} warp groups per item on a whole K2 / K3 expert", kg));
            // 256 inputs per stage by default where both K allow it and two stages of up to 16-row m-blocks fit
            const bool wide = pb.wdn.k_pad % 256 == 0 && pb.wgu.k_pad % 256 == 0 && layer_->tiles() <= 2;
            const int want_bk = tuning_.decode_block_k ? tuning_.decode_block_k : wide ? 256 : bk;
            expect(plan_.gate_up->desc.config.as<jit::MoeW4A16DecodeFusedConfig>().block_k == want_bk,
                   fmt::format("fused kernel {} (block_k {} expected)", plan_.gate_up->name, want_bk));
        }
        return bad;
    }

    std::string family_;
    std::shared_ptr<SharedProblem> p_;
    MoeLayerConfig cfg_;
    autotune::MoeW4A16Tuning tuning_;
    std::unique_ptr<MoeW4A16> layer_;
    model::layers::MoeW4A16Plan plan_;
    model::layers::MoeW4A16Tensors t_;
    runtime::Buffer out_;
    std::vector<uint16_t> first_;
};

std::shared_ptr<SharedProblem> shared(const MoeSpec& s) {
    static std::map<std::string, std::weak_ptr<SharedProblem>> problems;
    auto& w = problems[s.name];
    if (auto p = w.lock()) return p;
    auto p = std::make_shared<SharedProblem>();
    p->spec = s;
    w = p;
    return p;
}

}  // namespace

const std::vector<MoeSpec>& device_problems() {
    static const std::vector<MoeSpec> v = {
        {"int4 silu uniform", F::int4_g32_bf16, silu, 256, 128, 16, 4, 40, "uniform", 1},
        {"int4 silu, K and down's K of 256-input stages", F::int4_g32_bf16, silu, 512, 256, 16, 4, 40, "uniform", 1},
        {"mxfp4 situ tiles 2, K and down's K of 256-input stages", F::mxfp4_g32_e8m0, situ, 256, 512, 16, 8, 48,
         "skewed", 2},
        {"mxfp4 situ uniform", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 40, "uniform", 1},
        {"int4 situ tiles 2", F::int4_g32_bf16, situ, 256, 128, 16, 4, 40, "uniform", 2},
        {"mxfp4 silu tiles 4", F::mxfp4_g32_e8m0, silu, 256, 128, 16, 4, 40, "uniform", 4},
        {"one token", F::int4_g32_bf16, silu, 256, 128, 16, 4, 1, "uniform", 1},
        {"one token top-16", F::mxfp4_g32_e8m0, situ, 256, 192, 64, 16, 1, "uniform", 1},
        {"skewed", F::int4_g32_bf16, silu, 256, 128, 32, 8, 200, "skewed", 2},
        {"hot expert", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 150, "hot", 1},
        {"hot expert tiles 4", F::int4_g32_bf16, silu, 256, 128, 16, 4, 150, "hot", 4},
        {"half the experts empty", F::int4_g32_bf16, silu, 256, 128, 32, 4, 60, "half_empty", 1},
        {"foreign experts", F::int4_g32_bf16, silu, 256, 128, 8, 4, 64, "foreign", 1},
        {"no local expert", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 1},
        {"no local expert, fused-sized call", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 40, "none", 1},
        {"hidden 224 (masked K), foreign experts", F::int4_g32_bf16, silu, 224, 128, 16, 4, 40, "foreign", 1},
        {"odd sizes int4", F::int4_g32_bf16, silu, 224, 96, 5, 2, 33, "uniform", 1},
        {"odd sizes mxfp4", F::mxfp4_g32_e8m0, situ, 160, 160, 7, 3, 21, "uniform", 2},
        {"4096 tokens", F::int4_g32_bf16, silu, 256, 128, 64, 8, 4096, "uniform", 4},
        {"16384 tokens", F::mxfp4_g32_e8m0, situ, 128, 64, 32, 4, 16384, "uniform", 4},
        {"prefill odd K, 2048 tokens", F::int4_g32_bf16, silu, 352, 160, 12, 4, 2048, "skewed", 4},
        {"prefill 8192 tokens", F::mxfp4_g32_e8m0, situ, 256, 96, 24, 6, 8192, "uniform", 4},
        {"prefill hot expert 4096, odd sizes", F::int4_g32_bf16, silu, 224, 320, 16, 6, 4096, "hot", 4},
        {"prefill 4099 tokens top-3 (ids not a multiple of 4)", F::int4_g32_bf16, silu, 256, 128, 24, 3, 4099,
         "uniform", 4},
        {"prefill foreign slots 2048", F::int4_g32_bf16, situ, 256, 160, 48, 8, 2048, "foreign", 4},
        {"prefill half the experts empty 8192", F::int4_g32_bf16, situ, 160, 96, 32, 4, 8192, "half_empty", 4},
        {"prefill skewed 16384, K 352", F::mxfp4_g32_e8m0, silu, 352, 64, 64, 4, 16384, "skewed", 4},
        {"prefill mxfp4 silu 2048 odd", F::mxfp4_g32_e8m0, silu, 160, 224, 12, 4, 2048, "uniform", 4},
        // K a multiple of 64 but not of 128 for both GEMMs (unmasked): the prefill GEMMs take block_k 64.
        {"prefill K 320 / 192, block_k 64", F::int4_g32_bf16, situ, 320, 192, 16, 4, 2048, "skewed", 4},
        {"prefill short K, 9 super-blocks of down (a part CTA column)", F::int4_g32_bf16, silu, 1152, 128, 8, 2, 2048,
         "skewed", 4},
        {"prefill K 1152, 3 gate_up super-blocks (a half-empty wide CTA)", F::mxfp4_g32_e8m0, situ, 1152, 192, 8, 2,
         2048, "hot", 4},
        {"K2 shapes", F::int4_g32_bf16, silu, 7168, 2048, 16, 8, 6, "uniform", 1},
        {"K3 shapes", F::mxfp4_g32_e8m0, situ, 3584, 3072, 24, 16, 3, "uniform", 1},
        // TP8-sliced expert shapes (intermediate / 8): down's K is 256 (K2) or 384 (K3).
        {"K2 TP8 slice", F::int4_g32_bf16, silu, 7168, 256, 16, 8, 6, "uniform", 1},
        {"K3 TP8 slice", F::mxfp4_g32_e8m0, situ, 3584, 384, 24, 16, 3, "uniform", 1},
        {"prefill K2 TP8 slice, 512 tokens", F::int4_g32_bf16, silu, 7168, 256, 4, 2, 512, "skewed", 4},
        {"prefill K3 TP8 slice, 512 tokens", F::mxfp4_g32_e8m0, situ, 3584, 384, 4, 2, 512, "skewed", 4},
    };
    return v;
}

const std::vector<MoeSpec>& shared_problems() {
    static const std::vector<MoeSpec> v = {
        {"host int4 silu uniform", F::int4_g32_bf16, silu, 256, 128, 16, 4, 40, "uniform", 1},
        {"host mxfp4 situ tiles 2", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 40, "uniform", 2},
        {"host one token top-16", F::mxfp4_g32_e8m0, situ, 256, 192, 64, 16, 1, "uniform", 1},
        {"host skewed", F::int4_g32_bf16, silu, 256, 128, 32, 8, 100, "skewed", 2},
        {"host hot expert tiles 4", F::int4_g32_bf16, situ, 256, 128, 16, 4, 150, "hot", 4},
        {"host half the experts empty", F::mxfp4_g32_e8m0, silu, 256, 128, 32, 4, 60, "half_empty", 1},
        {"host foreign experts", F::int4_g32_bf16, silu, 256, 128, 8, 4, 64, "foreign", 1},
        {"host no local expert", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 1},
        {"host odd sizes int4", F::int4_g32_bf16, silu, 224, 96, 5, 2, 33, "uniform", 1},
        {"host odd sizes mxfp4", F::mxfp4_g32_e8m0, situ, 160, 160, 7, 3, 21, "uniform", 2},
        // The K2 / K3 expert shapes, whole (an EP slice) and TP8-sliced; few experts and tokens keep the
        // reference cheap.
        {"host K2 expert 7168 x 2048", F::int4_g32_bf16, silu, 7168, 2048, 4, 2, 3, "uniform", 1},
        {"host K2 TP8 slice 7168 x 256", F::int4_g32_bf16, silu, 7168, 256, 8, 4, 5, "skewed", 1},
        {"host K3 expert 3584 x 3072", F::mxfp4_g32_e8m0, situ, 3584, 3072, 4, 2, 3, "uniform", 1},
        {"host K3 TP8 slice 3584 x 384", F::mxfp4_g32_e8m0, situ, 3584, 384, 8, 4, 5, "skewed", 1},
    };
    return v;
}

const std::vector<MoeSpec>& shared_prefill_problems() {
    static const std::vector<MoeSpec> v = {
        {"host prefill int4 silu skewed", F::int4_g32_bf16, silu, 256, 128, 12, 4, 300, "skewed", 0},
        {"host prefill mxfp4 situ hot", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 260, "hot", 0},
        {"host prefill foreign experts", F::int4_g32_bf16, situ, 256, 128, 8, 4, 200, "foreign", 0},
        {"host prefill half empty", F::mxfp4_g32_e8m0, silu, 160, 96, 16, 4, 150, "half_empty", 0},
        {"host prefill odd sizes", F::int4_g32_bf16, silu, 224, 96, 5, 2, 133, "uniform", 0},
        {"host prefill no local expert", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 0},
        {"host prefill K2 TP8 slice 7168 x 256", F::int4_g32_bf16, silu, 7168, 256, 4, 2, 40, "uniform", 0},
        {"host prefill K3 TP8 slice 3584 x 384", F::mxfp4_g32_e8m0, situ, 3584, 384, 4, 2, 40, "uniform", 0},
    };
    return v;
}

void add_layer_cases(CaseList& out, const std::string& family, const std::vector<MoeSpec>& problems,
                     const std::vector<MoeLayerConfig>& configs) {
    for (const MoeSpec& s : problems) {
        auto p = shared(s);
        for (const MoeLayerConfig& c : configs) {
            autotune::MoeW4A16Tuning t;
            c.apply(t);
            // the large prefill m-blocks and the wide CTA are for prefill-sized calls only
            if (t.prefill_block_m != 0 && !t.prefill_wide && s.tokens < 2048) continue;
            // two 256-input stages of 32-row m-blocks do not fit
            if (t.decode_block_k == 256 && s.tiles > 2) continue;
            out.push_back(std::make_unique<LayerCase>(family, p, c));
        }
    }
}

}  // namespace kiln::ops::moe_test
