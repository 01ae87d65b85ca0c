#include "model/tune/moe_w4a16_sweep.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autotune/tuned_tables.hpp"
#include "model/layers/moe_w4a16.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/bf16.hpp"
#include "runtime/error.hpp"

namespace kiln::model::tune {

namespace w = kiln::model::weights;
using autotune::SweepCandidate;
using autotune::SweepRun;

autotune::ShapeKey MoeLayerShape::key() const {
    return autotune::moe_w4a16_shape_key(hidden, intermediate, experts, topk, format,
                                         jit::moe::k_act_names[static_cast<int>(act)], ep_size);
}

std::vector<MoeLayerShape> moe_layer_shapes(const ModelConfig& c, int ep_size) {
    if (ep_size < 1) throw InvalidArgument(fmt::format("ep_size={} (at least 1)", ep_size));
    std::vector<MoeLayerShape> out;
    if (c.expert_format == ExpertFormat::bf16 || c.moe.num_experts < 1) return out;
    bool any_moe = false;
    for (int l = 0; l < c.num_layers; ++l) any_moe = any_moe || c.is_moe(l);
    if (!any_moe) return out;
    MoeLayerShape s;
    s.hidden = c.expert_in_dim();
    s.intermediate = c.moe.moe_intermediate_size;
    s.experts = c.moe.num_experts;
    s.topk = c.moe.top_k;
    s.format = c.expert_format == ExpertFormat::int4_g32 ? jit::WeightFormat::int4_g32_bf16 : jit::WeightFormat::mxfp4_g32_e8m0;
    s.act = c.hidden_act == Activation::situ ? jit::moe::Activation::situ_glu : jit::moe::Activation::silu_glu;
    s.ep_size = ep_size;
    out.push_back(s);  // every MoE layer of a K3 model has the same routed-expert shape
    return out;
}

std::vector<SweepCandidate> moe_w4a16_candidates(jit::Target target) {
    std::vector<SweepCandidate> c;
    const char* no_other = "rows_combine_min=-1,prefill_min=-1";
    if (target.is_host()) {
        for (int t : {1, 2, 4}) c.push_back({fmt::format("tiles={},{}", t, no_other), 8 * t, "decode"});
        for (int t : {1, 2, 4}) c.push_back({fmt::format("tiles={},rows_combine_min=0,prefill_min=-1", t), 8 * t, "decode_rows"});
        c.push_back({"prefill_min=0,prefill_block_m=64,prefill_wgmma=false", 64, "prefill"});
        return c;
    }
    for (const char* sched : {"static", "dynamic"})
        for (int t : {1, 2, 4}) {
            c.push_back({fmt::format("tiles={},fuse=false,gate_up_schedule={},down_schedule={},{}", t, sched, sched, no_other),
                         8 * t, "decode"});
            c.push_back({fmt::format("tiles={},fuse=false,gate_up_schedule={},down_schedule={},rows_combine_min=0,"
                                     "prefill_min=-1",
                                     t, sched, sched),
                         8 * t, "decode_rows"});
        }
    for (int t : {1, 2, 4})
        for (int kg : {1, 2, 4})
            for (int bk : {128, 256})
                for (int stages : {0, 4})
                    c.push_back({fmt::format("tiles={},fuse=true,fused_min=1,gate_up_schedule=dynamic,down_schedule=dynamic,"
                                             "fused_k_groups={},fused_k_groups_max_slots=1048576,decode_block_k={},"
                                             "decode_stages={},{}",
                                             t, kg, bk, stages, no_other),
                                 8 * t, "fused"});
    c.push_back({"prefill_min=0,prefill_block_m=64,prefill_wgmma=false", 64, "prefill"});
    for (int bm : {64, 128, 192})
        c.push_back({fmt::format("prefill_min=0,prefill_block_m={},prefill_wgmma=true", bm), bm, "prefill"});
    c.push_back({"prefill_min=0,prefill_block_m=64,prefill_wgmma=true,prefill_wide=true", 64, "prefill"});
    return c;
}

std::vector<int64_t> moe_w4a16_sweep_sizes(int max_tokens, bool device) {
    if (max_tokens < 1) throw InvalidArgument(fmt::format("max_tokens={} (at least 1)", max_tokens));
    std::set<int64_t> s;
    for (int64_t m = 1; m <= max_tokens; m *= 2) {
        s.insert(m);
        if (device && m >= 32 && m * 3 / 2 <= max_tokens) s.insert(m * 3 / 2);
    }
    s.insert(max_tokens);
    return {s.begin(), s.end()};
}

namespace {

// Random bytes in the kernel layout with sane scales (INT4 bf16 in [0.004, 0.012), E8M0 117..121), `copies`
// back to back.
runtime::Buffer random_weights(runtime::Backend& backend, const w::PreparedMoeWeights& m, int copies, uint64_t seed) {
    const size_t one = m.expert_stride * m.experts;
    std::vector<std::byte> host(one);
    const int rec = w::layout_record_bytes(m.format, m.layout);
    const int wbytes = 8 * 512, sbytes = rec - wbytes;
    const bool int4 = m.format == jit::WeightFormat::int4_g32_bf16;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    for (size_t r = 0; r < one / rec; ++r) {
        std::byte* p = host.data() + r * rec;
        for (int i = 0; i < wbytes; i += 8) {
            const uint64_t v = next();
            std::memcpy(p + i, &v, 8);
        }
        for (int i = 0; i < sbytes; i += int4 ? 2 : 1) {
            const uint64_t v = next();
            if (int4) {
                const uint16_t b = runtime::float_to_bf16(0.004f + 0.008f * static_cast<float>(v >> 40) / 16777216.0f);
                std::memcpy(p + wbytes + i, &b, 2);
            } else {
                p[wbytes + i] = static_cast<std::byte>(117 + (v >> 61) % 5);
            }
        }
    }
    runtime::Buffer d = backend.alloc(one * static_cast<size_t>(copies));
    for (int c = 0; c < copies; ++c) backend.upload(d.addr() + one * c, host.data(), one);
    return d;
}

// What every point of one shape shares: the layout metadata and the rotated weight copies.
struct MoeSweepState {
    jit::Dispatcher* disp = nullptr;
    runtime::Backend* backend = nullptr;
    MoeLayerShape shape;
    autotune::SkuIdentity sku;
    MoeSweepOptions options;
    w::PreparedMoeWeights gu, dn;
    runtime::Buffer wgu, wdn;
    int copies = 0;

    void ensure_weights() {
        if (copies) return;
        const double per = static_cast<double>(gu.expert_stride * gu.experts + dn.expert_stride * dn.experts);
        uint64_t budget = options.weight_budget_bytes;
        if (budget == 0) budget = std::min<uint64_t>(sku.memory_bytes / 4, uint64_t(16) << 30);
        copies = autotune::rotation_copies(per, sku.cache_bytes, budget);
        wgu = random_weights(*backend, gu, copies, options.seed * 2 + 1);
        wdn = random_weights(*backend, dn, copies, options.seed * 2 + 2);
    }
};

class MoeRun final : public SweepRun {
public:
    MoeRun(std::shared_ptr<MoeSweepState> st, std::unique_ptr<layers::MoeW4A16> layer, layers::MoeW4A16Plan plan, int m)
        : st_(std::move(st)), layer_(std::move(layer)), plan_(plan) {
        runtime::Backend& b = *st_->backend;
        const int hidden = st_->shape.hidden, topk = st_->shape.topk, experts = st_->shape.experts;
        std::mt19937_64 rng(st_->options.seed * 7919 + static_cast<uint64_t>(m));
        const int global = experts * st_->shape.ep_size;
        std::vector<int32_t> ids(static_cast<size_t>(m) * topk);
        std::vector<float> wts(ids.size());
        std::uniform_int_distribution<int> pick(0, global - 1);
        std::uniform_real_distribution<float> wd(0.05f, 1.0f);
        std::set<int> active;
        for (int t = 0; t < m; ++t) {
            std::set<int> chosen;
            while (static_cast<int>(chosen.size()) < std::min(topk, global)) chosen.insert(pick(rng));
            int j = 0;
            for (int e : chosen) {
                ids[static_cast<size_t>(t) * topk + j] = e < experts ? e : -1;
                if (e < experts) active.insert(e);
                wts[static_cast<size_t>(t) * topk + j] = wd(rng);
                ++j;
            }
            for (; j < topk; ++j) ids[static_cast<size_t>(t) * topk + j] = -1, wts[static_cast<size_t>(t) * topk + j] = 0;
        }
        std::vector<uint16_t> x(static_cast<size_t>(m) * hidden);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (uint16_t& v : x) v = runtime::float_to_bf16(nd(rng));
        x_ = runtime::upload_buffer(b, x.data(), x.size() * 2);
        ids_ = runtime::upload_buffer(b, ids.data(), ids.size() * 4);
        wts_ = runtime::upload_buffer(b, wts.data(), wts.size() * 4);
        out_ = b.alloc(x.size() * 2);
        t_.x = x_.view(runtime::DType::bf16, {m, hidden});
        t_.topk_ids = ids_.view(runtime::DType::i32, {m, topk});
        t_.topk_weights = wts_.view(runtime::DType::f32, {m, topk});
        t_.out = out_.view(runtime::DType::bf16, {m, hidden});
        bytes_ = static_cast<double>(active.size()) *
                     static_cast<double>(st_->gu.expert_stride + st_->dn.expert_stride) +
                 4.0 * static_cast<double>(x.size());
    }
    int copies() const override { return st_->copies; }
    void enqueue(runtime::Stream& s, int copy) override {
        t_.gate_up = st_->wgu.addr() + static_cast<uint64_t>(copy) * st_->gu.expert_stride * st_->gu.experts;
        t_.down = st_->wdn.addr() + static_cast<uint64_t>(copy) * st_->dn.expert_stride * st_->dn.experts;
        layer_->run(plan_, t_, s);
    }
    double bytes() const override { return bytes_; }

private:
    std::shared_ptr<MoeSweepState> st_;
    std::unique_ptr<layers::MoeW4A16> layer_;
    layers::MoeW4A16Plan plan_;
    runtime::Buffer x_, ids_, wts_, out_;
    layers::MoeW4A16Tensors t_;
    double bytes_ = 0;
};

}  // namespace

autotune::SweepCase moe_w4a16_sweep_case(jit::Dispatcher& disp, runtime::Backend& backend, const MoeLayerShape& shape,
                                         const autotune::SkuIdentity& sku, const MoeSweepOptions& options) {
    auto st = std::make_shared<MoeSweepState>();
    st->disp = &disp;
    st->backend = &backend;
    st->shape = shape;
    st->sku = sku;
    st->options = options;
    st->gu = w::moe_weights_layout(shape.format, w::W4Layout::decode_mma16, true, shape.experts, shape.intermediate,
                                   shape.hidden);
    st->dn = w::moe_weights_layout(shape.format, w::W4Layout::decode_mma16, false, shape.experts, shape.hidden,
                                   shape.intermediate);
    const bool host = backend.kind() == runtime::BackendKind::host;
    autotune::SweepCase c;
    c.shape = shape.key();
    c.ms = moe_w4a16_sweep_sizes(options.max_tokens, !host);
    c.candidates = moe_w4a16_candidates(host ? jit::Target::host_target() : disp.device_target());
    c.prepare = [st](const SweepCandidate& cand, int64_t m) -> std::unique_ptr<SweepRun> {
        autotune::MoeW4A16Tuning tuning = autotune::default_moe_w4a16_tuning(st->shape.format);
        autotune::apply_tuning_text(tuning, cand.config);
        layers::MoeW4A16Shape ls;
        ls.act = st->shape.act;
        ls.topk = st->shape.topk;
        ls.max_tokens = static_cast<int>(m);
        ls.ep_size = st->shape.ep_size;
        std::unique_ptr<layers::MoeW4A16> layer;
        try {
            layer = std::make_unique<layers::MoeW4A16>(*st->disp, *st->backend, st->gu, st->dn, ls, tuning);
        } catch (const InvalidArgument&) {
            return nullptr;  // a configuration this shape or target cannot build
        }
        const layers::MoeW4A16Plan plan = layer->plan(static_cast<int>(m));
        if (layers::to_string(plan.path) != cand.schedule || plan.block_m != cand.block_m) return nullptr;
        st->ensure_weights();
        return std::make_unique<MoeRun>(st, std::move(layer), plan, static_cast<int>(m));
    };
    return c;
}

std::vector<std::string> tunable_families() { return {"moe_w4a16"}; }

std::vector<autotune::SweepCase> model_sweep_cases(const ModelConfig& config, const std::vector<std::string>& families,
                                                   jit::Dispatcher& disp, runtime::Backend& backend,
                                                   const autotune::SkuIdentity& sku, const MoeSweepOptions& options,
                                                   int ep_size) {
    const std::vector<std::string> known = tunable_families();
    std::set<std::string> want;
    for (const std::string& f : families) {
        if (f.empty()) continue;
        if (std::find(known.begin(), known.end(), f) == known.end())
            throw InvalidArgument(fmt::format("unknown family '{}' to tune (tunable: {})", f, fmt::join(known, ", ")));
        want.insert(f);
    }
    if (want.empty()) want.insert(known.begin(), known.end());
    std::vector<autotune::SweepCase> out;
    if (want.count("moe_w4a16"))
        for (const MoeLayerShape& s : moe_layer_shapes(config, ep_size))
            out.push_back(moe_w4a16_sweep_case(disp, backend, s, sku, options));
    if (out.empty())
        throw InvalidArgument("the model has nothing to tune (no moe_w4a16 layer: its experts are not INT4 or MXFP4)");
    return out;
}

}  // namespace kiln::model::tune
