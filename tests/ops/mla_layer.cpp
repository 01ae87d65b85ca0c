// Op cases of the MLA layer's attention core (model/layers/mla) against the fp32 reference layer
// (model/reference/mla, plain or absorbed evaluation). The reference runs on x = [q ; c_kv ; k_rope ; g] with
// selecting projections (q_proj, kv_a_proj_with_mqa and g_proj pick their block of x, o_proj is the identity on
// the first n_h d_v outputs), so its output is the gated attention the layer ends with; kv_a_layernorm is
// random. The layer gets the same q, k_rope and gate values and the reference's normed latent rounded to bf16
// (its input format). Cached prefixes are random rows in the pages and in the reference's cache. Tolerance:
// relative L2 1.5e-2 over the output (bf16 inputs, bf16 q̃ and ō in between, one rounding of the output).
// Cases: page sizes 1, 16, 64; decodes over long cached contexts, whole and split into pieces; a prefill
// chunk continuing a cached prefix run as two steps against the whole in one reference call; mixed batches;
// the output gate on and off.
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "model/layers/mla.hpp"
#include "model/reference/mla.hpp"
#include "tests/common/tolerance.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/mla_problem.hpp"

namespace kiln::ops {

namespace {

namespace ref = model::reference;
namespace forward = model::forward;
using mla_test::PagedCache;
using mla_test::SeqSpec;
using mla_test::Step;
using model::layers::MlaDims;
using runtime::bf16_to_float;
using runtime::float_to_bf16;

struct LayerSpec {
    const char* what;
    MlaDims dims;
    int page_size;
    std::vector<SeqSpec> seqs;
    std::vector<int> first;  // per sequence: new tokens of the first step (the rest run in a second); empty: one step
    bool gate = true;
    ref::MlaMode mode = ref::MlaMode::absorbed;
    int min_split_keys = 0;      // tuning overrides (0: the default)
    int target_ctas_per_cu = 0;
    bool fma = false;  // device: the CUDA-core attention kernels instead of the default tensor-core ones
};

MlaDims k3_dims(int heads) { return {heads, 512, 128, 64, 128}; }
MlaDims small_dims() { return {6, 64, 32, 16, 48}; }

class MlaLayerCase final : public OpCase {
public:
    explicit MlaLayerCase(LayerSpec spec) : s_(std::move(spec)) {}
    std::string family() const override { return "mla"; }
    bool runs_on(const test::TestBackend& b) const override {
        return !s_.fma || b.backend->kind() == runtime::BackendKind::cuda;
    }
    std::string name() const override {
        std::string seqs;
        for (size_t i = 0; i < s_.seqs.size(); ++i)
            seqs += fmt::format("{}{}+{}{}", i ? "," : "", s_.seqs[i].start, s_.seqs[i].tokens,
                                s_.first.empty() ? "" : fmt::format("({}|{})", s_.first[i], s_.seqs[i].tokens - s_.first[i]));
        return fmt::format("mla layer {}{}: {} heads, d_c {}, page size {}, gate {}, {} reference, seqs {}", s_.what,
                           s_.fma ? " (fma)" : "", s_.dims.heads, s_.dims.kv_lora_rank, s_.page_size,
                           s_.gate ? "on" : "off", s_.mode == ref::MlaMode::plain ? "plain" : "absorbed", seqs);
    }

    void setup(test::TestBackend& b) override {
        prepare();
        autotune::MlaTuning tuning = autotune::default_mla_tuning();
        if (s_.min_split_keys) tuning.min_split_keys = s_.min_split_keys;
        if (s_.target_ctas_per_cu) tuning.target_ctas_per_cu = s_.target_ctas_per_cu;
        if (s_.fma) {
            tuning.decode_mma = tuning.prefill_mma = false;
            tuning.decode_heads_per_cta = 16;
        }
        int max_tokens = 0;
        for (const StepData& st : steps_) max_tokens = std::max(max_tokens, st.tokens);
        layer_ = std::make_unique<model::layers::MlaLayer>(*b.disp, *b.backend, s_.dims, kv_->layout, 1, max_tokens, tuning);
        arena_ = test::upload(*b.backend, kv_->image);
        kv_b_d_ = test::upload(*b.backend, kv_b_);
        for (StepData& st : steps_) {
            st.step.upload(b, arena_, *kv_);
            st.plan = layer_->plan(st.step.host);
            st.q_d = test::upload(*b.backend, st.q);
            st.lr_d = test::upload(*b.backend, st.lat_rope);
            if (s_.gate) st.g_d = test::upload(*b.backend, st.g);
            st.out_d = b.backend->alloc(st.want.size() * 2);
        }
    }
    void poison(test::TestBackend& b) override {
        b.stream->upload(arena_.addr(), kv_->image.data(), kv_->image.size());  // the new rows back to NaN
        for (StepData& st : steps_) test::poison(*b.stream, st.out_d);
    }
    void run(test::TestBackend& b) override {
        const MlaDims& d = s_.dims;
        const auto loc = b.backend->location();
        for (StepData& st : steps_) {
            model::layers::MlaTensors t;
            const int64_t T = st.tokens, cd = d.cache_dim();
            t.q = runtime::TensorView::contiguous(st.q_d.data(), runtime::DType::bf16, {T, d.heads * d.qk_head()}, loc);
            t.latent = runtime::TensorView::contiguous(st.lr_d.data(), runtime::DType::bf16, {T, d.kv_lora_rank}, loc);
            t.latent.strides[0] = cd;
            t.k_rope = runtime::TensorView::contiguous(st.lr_d.as<uint16_t>() + d.kv_lora_rank, runtime::DType::bf16,
                                                       {T, d.qk_rope}, loc);
            t.k_rope.strides[0] = cd;
            t.kv_b = runtime::TensorView::contiguous(kv_b_d_.data(), runtime::DType::bf16,
                                                     {int64_t(d.heads) * (d.qk_nope + d.v_head), d.kv_lora_rank}, loc);
            if (s_.gate)
                t.gate = runtime::TensorView::contiguous(st.g_d.data(), runtime::DType::bf16, {T, d.heads * d.v_head}, loc);
            t.out = runtime::TensorView::contiguous(st.out_d.data(), runtime::DType::bf16, {T, d.heads * d.v_head}, loc);
            layer_->run(st.plan, t, st.step.dev, *b.stream);
        }
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        std::vector<uint16_t> got;
        std::vector<double> want;
        for (StepData& st : steps_) {
            const auto o = test::download<uint16_t>(*b.backend, st.out_d, st.want.size());
            got.insert(got.end(), o.begin(), o.end());
            want.insert(want.end(), st.want.begin(), st.want.end());
        }
        const test::OutputError e = test::bf16_error(got, want);
        std::vector<std::string> out;
        if (!e.within(1.5e-2)) out.push_back(e.describe());
        return out;
    }
    void teardown(test::TestBackend&) override {
        layer_.reset();
        arena_.reset();
        kv_b_d_.reset();
        for (StepData& st : steps_) {
            st.q_d.reset();
            st.lr_d.reset();
            st.g_d.reset();
            st.out_d.reset();
        }
    }
    Cost cost() const override {
        const MlaDims& d = s_.dims;
        Cost c;
        c.bytes = double(d.heads) * (d.qk_nope + d.v_head) * d.kv_lora_rank * 2;
        int64_t tokens = 0;
        for (const SeqSpec& q : s_.seqs) {
            c.bytes += double(q.start + q.tokens) * d.cache_dim() * 2;
            tokens += q.tokens;
            for (int i = 0; i < q.tokens; ++i)
                c.flops += double(q.start + i + 1) * d.heads * 2 * (d.cache_dim() + d.kv_lora_rank);
        }
        c.bytes += double(tokens) * (d.heads * (d.qk_head() + d.v_head * (s_.gate ? 2 : 1)) + d.cache_dim()) * 2;
        c.flops += 2.0 * tokens * d.heads * d.kv_lora_rank * (d.qk_nope + d.v_head);
        return c;
    }

private:
    struct StepData {
        std::vector<SeqSpec> seqs;
        std::vector<int> seq_of;  // batch sequence -> case sequence
        int tokens = 0;
        Step step;
        model::layers::MlaPlan plan;
        std::vector<uint16_t> q, lat_rope, g;
        std::vector<double> want;
        runtime::Buffer q_d, lr_d, g_d, out_d;
    };

    // Data, the reference, and the steps, made on first use.
    void prepare() {
        if (kv_) return;
        const MlaDims& d = s_.dims;
        const size_t H = size_t(d.heads), dn = size_t(d.qk_nope), dr = size_t(d.qk_rope), dv = size_t(d.v_head),
                     dc = size_t(d.kv_lora_rank), cd = dc + dr;
        const size_t qw = H * (dn + dr), gw = H * dv, hidden = qw + cd + gw;
        ref::MlaDims rd;
        rd.hidden = hidden;
        rd.heads = H;
        rd.kv_lora_rank = dc;
        rd.qk_nope = dn;
        rd.qk_rope = dr;
        rd.v_head = dv;
        rd.output_gate = s_.gate;
        ref::MlaWeights w;
        w.q_proj = ref::Matrix(qw, hidden);
        for (size_t i = 0; i < qw; ++i) w.q_proj.at(i, i) = 1.0f;
        w.kv_a = ref::Matrix(cd, hidden);
        for (size_t i = 0; i < cd; ++i) w.kv_a.at(i, qw + i) = 1.0f;
        w.kv_a_norm = test::random_f32(dc, 31, 0.5f, 1.5f);
        kv_b_ = test::random_bf16(H * (dn + dv) * dc, 32, 1.0f / std::sqrt(float(dn)));
        w.kv_b = ref::Matrix(H * (dn + dv), dc);
        for (size_t i = 0; i < kv_b_.size(); ++i) w.kv_b.data[i] = bf16_to_float(kv_b_[i]);
        if (s_.gate) {
            w.g_proj = ref::Matrix(gw, hidden);
            for (size_t i = 0; i < gw; ++i) w.g_proj.at(i, qw + cd + i) = 1.0f;
        }
        w.o_proj = ref::Matrix(hidden, gw);
        for (size_t i = 0; i < gw; ++i) w.o_proj.at(i, i) = 1.0f;
        w.validate(rd);

        std::vector<int> lengths;
        for (const SeqSpec& q : s_.seqs) lengths.push_back(q.start + q.tokens);
        kv_ = std::make_unique<PagedCache>(s_.page_size, int(cd), lengths, 33);

        // Per sequence: the cached rows, the new tokens' x, the reference output, the layer's inputs.
        struct SeqData {
            std::vector<uint16_t> q, lat_rope, g;
            std::vector<double> y;
        };
        std::vector<SeqData> per(s_.seqs.size());
        for (size_t s = 0; s < s_.seqs.size(); ++s) {
            const int start = s_.seqs[s].start, n = s_.seqs[s].tokens;
            ref::MlaCache cache = ref::MlaCache::empty(rd);
            const auto rows = test::random_bf16(size_t(start) * cd, 100 + s);
            for (int j = 0; j < start; ++j) {
                std::copy_n(rows.data() + size_t(j) * cd, cd, kv_->row(int(s), j));
                for (size_t c = 0; c < cd; ++c) cache.rows.push_back(bf16_to_float(rows[size_t(j) * cd + c]));
            }
            const auto xq = test::random_bf16(size_t(n) * qw, 200 + s);
            const auto xkv = test::random_bf16(size_t(n) * cd, 300 + s);
            const auto xg = test::random_bf16(size_t(n) * gw, 400 + s, 2.0f);
            ref::Matrix x(size_t(n), hidden);
            for (int t = 0; t < n; ++t) {
                for (size_t i = 0; i < qw; ++i) x.at(size_t(t), i) = bf16_to_float(xq[size_t(t) * qw + i]);
                for (size_t i = 0; i < cd; ++i) x.at(size_t(t), qw + i) = bf16_to_float(xkv[size_t(t) * cd + i]);
                for (size_t i = 0; i < gw; ++i) x.at(size_t(t), qw + cd + i) = bf16_to_float(xg[size_t(t) * gw + i]);
            }
            const ref::Matrix y = ref::mla_forward(w, rd, cache, x, s_.mode);
            SeqData& sd = per[s];
            sd.q = xq;
            sd.g = xg;
            sd.lat_rope.resize(size_t(n) * cd);
            for (int t = 0; t < n; ++t) {
                const float* row = cache.row(size_t(start + t));  // the normed latent, then the raw rope tail
                for (size_t c = 0; c < dc; ++c) sd.lat_rope[size_t(t) * cd + c] = float_to_bf16(row[c]);
                for (size_t c = 0; c < dr; ++c) sd.lat_rope[size_t(t) * cd + dc + c] = xkv[size_t(t) * cd + dc + c];
                for (size_t c = 0; c < gw; ++c) sd.y.push_back(y.at(size_t(t), c));
            }
        }

        // The steps: all new tokens at once, or each sequence's first part, then the rest.
        const int nsteps = s_.first.empty() ? 1 : 2;
        steps_.resize(size_t(nsteps));
        for (int k = 0; k < nsteps; ++k) {
            StepData& st = steps_[size_t(k)];
            for (size_t s = 0; s < s_.seqs.size(); ++s) {
                const int n = s_.seqs[s].tokens;
                const int a = nsteps == 1 ? n : s_.first[s];
                const int lo = k == 0 ? 0 : a, hi = k == 0 ? a : n;
                if (hi <= lo) continue;
                st.seqs.push_back({s_.seqs[s].start + lo, hi - lo});
                st.seq_of.push_back(int(s));
                const SeqData& sd = per[s];
                st.q.insert(st.q.end(), sd.q.begin() + long(size_t(lo) * qw), sd.q.begin() + long(size_t(hi) * qw));
                st.lat_rope.insert(st.lat_rope.end(), sd.lat_rope.begin() + long(size_t(lo) * cd),
                                   sd.lat_rope.begin() + long(size_t(hi) * cd));
                st.g.insert(st.g.end(), sd.g.begin() + long(size_t(lo) * gw), sd.g.begin() + long(size_t(hi) * gw));
                st.want.insert(st.want.end(), sd.y.begin() + long(size_t(lo) * gw), sd.y.begin() + long(size_t(hi) * gw));
                st.tokens += hi - lo;
            }
            // the step's batch sequence i is the case's sequence seq_of[i]: its pages
            forward::ForwardBatch fb;
            for (size_t i = 0; i < st.seqs.size(); ++i) {
                forward::SequenceStep q;
                q.start = st.seqs[i].start;
                q.tokens.assign(size_t(st.seqs[i].tokens), 1);
                q.slot = int32_t(i);
                q.pages = kv_->pages[size_t(st.seq_of[i])];
                fb.seqs.push_back(std::move(q));
            }
            forward::StepLimits lim;
            lim.num_slots = int32_t(st.seqs.size());
            lim.num_pages = kv_->num_pages;
            lim.page_size = kv_->page_size;
            st.step.host = forward::build_step_index(fb, lim);
        }
    }

    LayerSpec s_;
    std::unique_ptr<PagedCache> kv_;
    std::vector<uint16_t> kv_b_;
    std::vector<StepData> steps_;
    std::unique_ptr<model::layers::MlaLayer> layer_;
    runtime::Buffer arena_, kv_b_d_;
};

}  // namespace

void add_mla_layer_cases(CaseList& out) {
    using ref::MlaMode;
    const std::vector<SeqSpec> decodes = {{0, 1}, {17, 1}, {200, 1}, {700, 1}};
    for (int ps : {1, 16, 64})
        out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{"paged decode", k3_dims(4), ps, decodes}));
    // decode against a long cached context: as the plan splits it, and in many short pieces
    out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{"long decode", k3_dims(4), 64, {{4095, 1}, {3000, 1}}}));
    out.push_back(std::make_unique<MlaLayerCase>(
        LayerSpec{"long decode in pieces", k3_dims(4), 16, {{4095, 1}, {3000, 1}, {33, 1}}, {}, true, MlaMode::absorbed, 256, 64}));
    // K3's dims with 16 heads (a sixth of them, as under tensor parallelism): 8 decodes over up to 2k keys
    out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{
        "k3 decode", k3_dims(16), 64, {{2047, 1}, {1500, 1}, {999, 1}, {64, 1}, {1, 1}, {1800, 1}, {700, 1}, {2000, 1}}}));
    // prefill chunks continuing a cached prefix (and a fresh prompt), two steps against the whole
    out.push_back(std::make_unique<MlaLayerCase>(
        LayerSpec{"chunked prefill", k3_dims(4), 16, {{300, 96}, {0, 70}}, {40, 30}, true, MlaMode::plain}));
    out.push_back(std::make_unique<MlaLayerCase>(
        LayerSpec{"chunked prefill", small_dims(), 1, {{65, 50}, {0, 64}}, {1, 63}, true, MlaMode::plain}));
    // mixed batches: decodes and prefill chunks in one step
    out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{"mixed batch", k3_dims(4), 16,
                                                           {{50, 1}, {1000, 1}, {128, 64}, {0, 33}}, {}, true,
                                                           MlaMode::plain}));
    out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{"mixed batch in pieces", k3_dims(4), 64,
                                                           {{2000, 1}, {500, 40}, {0, 1}}, {}, true, MlaMode::absorbed,
                                                           256, 64}));
    out.push_back(std::make_unique<MlaLayerCase>(
        LayerSpec{"mixed batch", small_dims(), 64, {{10, 20}, {63, 1}, {130, 3}}, {5, 1, 2}, false, MlaMode::plain}));
    out.push_back(std::make_unique<MlaLayerCase>(
        LayerSpec{"gate off", k3_dims(2), 16, {{31, 1}, {7, 9}}, {}, false, MlaMode::absorbed}));
    // the CUDA-core attention kernels (device): a mixed batch, and a chunked prefill in pieces
    out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{"mixed batch", k3_dims(4), 16,
                                                           {{50, 1}, {1000, 1}, {128, 64}, {0, 33}}, {}, true,
                                                           MlaMode::plain, 0, 0, true}));
    out.push_back(std::make_unique<MlaLayerCase>(LayerSpec{"chunked prefill in pieces", k3_dims(4), 64,
                                                           {{300, 96}, {2000, 1}}, {40, 1}, true, MlaMode::plain, 256,
                                                           64, true}));
}

}  // namespace kiln::ops
