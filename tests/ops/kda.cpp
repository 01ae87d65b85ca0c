// Op cases of the KDA families (kda_prep, kda_chunk, kda_decode, kda_out_norm) and of the KDA layer
// (model/layers/kda) against model/reference/kda. A scenario is a set of sequences (each continuing from a
// random prior state at its start position, or fresh from zeros) run over one or more steps (varlen, decodes
// and prefill chunks mixed, snapshots at multiples of 64); its reference runs each sequence's tokens of all
// steps at once, token by token (fp64 accumulation), so a case that splits a sequence across steps checks
// chunked == whole == stepwise, and snapshot states are checked against the recurrent state at that position.
// Inputs are seeded random bf16 projections (never zeros); outputs, snapshot slots and the states are reset
// and poisoned before every run; the other KDA layer's part of every slot must come back untouched.
// Bounds (relative L2 over each tensor):
//   kda_prep outputs (q, k, v, g, beta)       1e-5   fp32 math against fp64
//   conv states (working and snapshots)       exact  bit copies of bf16 inputs
//   delta-rule output o, fp32 states          1e-4   fp32 chunk / recurrent forms against the fp64-accumulated
//                                                    recurrence (a 1% error in one entry of A exceeds it)
//   bf16 layer output                         5e-3   one bf16 rounding (about 2e-3) on top
//   o_proj(output), final state against ref::kda_forward (fp32 projections there)   1e-2
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include <fmt/format.h>

#include "jit/families/kda_chunk.hpp"
#include "jit/families/kda_decode.hpp"
#include "jit/families/kda_out_norm.hpp"
#include "jit/families/kda_prep.hpp"
#include "model/forward/memory_layout.hpp"
#include "model/forward/step_index.hpp"
#include "model/layers/kda.hpp"
#include "model/reference/kda.hpp"
#include "tests/common/tensors.hpp"
#include "tests/common/tolerance.hpp"
#include "tests/ops/cases.hpp"

namespace kiln::ops {

namespace {

namespace ref = model::reference;
using runtime::bf16_to_float;
using runtime::DType;
using runtime::float_to_bf16;

constexpr int kHist = 3;  // conv 4
constexpr double kTolAct = 1e-5, kTolO = 1e-4, kTolState = 1e-4, kTolOut = 5e-3;
constexpr float kNormEps = 1e-5f;
// The whole layer against ref::kda_forward, whose projections stay fp32 (here they are rounded to bf16).
constexpr double kTolForward = 1e-2;

enum class Mode { layer, prep, chunk, decode, out_norm };
const char* family_of(Mode m) {
    switch (m) {
        case Mode::layer: return "kda";
        case Mode::prep: return "kda_prep";
        case Mode::chunk: return "kda_chunk";
        case Mode::decode: return "kda_decode";
        case Mode::out_norm: return "kda_out_norm";
    }
    return "kda";
}

struct SeqSpec {
    int start = 0;       // position before the first step
    bool fresh = false;  // zero state (start 0) instead of a random prior state
};
struct StepSeq {
    int seq = 0, n = 0;
    std::vector<int> snaps;  // absolute positions (multiples of 64 inside the step)
};

struct Scenario {
    std::string name;
    int H = 2, K = 64;
    std::optional<float> lb = -5.0f;  // unset: the softplus gate
    bool near_bound = false;          // gates saturated near the lower bound
    bool quick = true;
    bool decode_kernel = true;
    bool a_log_check = false;         // also show that the per-channel A_log reading is told apart
    int hidden = 0;                   // > 0: inputs are projections of x [T, hidden] and the layer (with o_proj
                                      // applied) is also checked against ref::kda_forward
    uint64_t seed = 1;
    std::vector<SeqSpec> seqs;
    std::vector<std::vector<StepSeq>> steps;
};

// One sequence's inputs over all steps and its reference.
struct SeqData {
    int start = 0, total = 0;
    std::vector<uint16_t> raw[3], z, beta_raw, gate;  // [total, HK] ([total, H] for beta_raw)
    std::vector<float> S0;                           // [H, K, K]
    std::vector<uint16_t> conv0;                     // [3][3][HK]
    std::vector<float> act[4];                       // q, k, v, g  [total, HK]
    std::vector<float> beta;                         // [total, H]
    std::vector<double> o, out;                      // [total, HK]
    std::vector<float> S_end;
    std::map<int, std::vector<float>> S_at;
    std::vector<double> y;            // hidden > 0: ref::kda_forward's output [total, hidden]
    std::vector<float> S_forward;     // and its final state
    // conv state after `e` of the tokens (e relative to start)
    std::vector<uint16_t> conv_after(int e, int HK) const {
        std::vector<uint16_t> c(size_t(3) * kHist * HK);
        for (int x = 0; x < 3; ++x)
            for (int r = 0; r < kHist; ++r) {
                const int off = e - kHist + r;
                for (int ch = 0; ch < HK; ++ch)
                    c[(size_t(x) * kHist + r) * HK + ch] =
                        off >= 0 ? raw[x][size_t(off) * HK + ch] : conv0[(size_t(x) * kHist + kHist + off) * HK + ch];
            }
        return c;
    }
};

struct Weights {
    std::vector<float> conv[3], dt_bias, a_log, o_norm;
};

// The activated inputs and the delta rule of one sequence (reference), per head; `a_log_channel` reads
// A_log per channel instead (the wrong reading, to show the cases tell them apart).
void reference(const Scenario& sc, const Weights& w, SeqData& d, const std::set<int>& snap_pos, bool a_log_channel) {
    const int H = sc.H, K = sc.K, HK = H * K, T = d.total;
    auto u = [&](int x, int off, int ch) -> double {
        return bf16_to_float(off >= 0 ? d.raw[x][size_t(off) * HK + ch] : d.conv0[(size_t(x) * kHist + kHist + off) * HK + ch]);
    };
    for (auto& a : d.act) a.assign(size_t(T) * HK, 0.0f);
    d.beta.assign(size_t(T) * H, 0.0f);
    const double q_scale = 1.0 / std::sqrt(double(K));
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
            double y[3][128];
            double ss[2] = {0, 0};
            for (int x = 0; x < 3; ++x)
                for (int i = 0; i < K; ++i) {
                    const int ch = h * K + i;
                    double acc = 0;
                    for (int j = 0; j < 4; ++j) acc += double(w.conv[x][size_t(ch) * 4 + j]) * u(x, t - kHist + j, ch);
                    y[x][i] = acc / (1.0 + std::exp(-acc));
                    if (x < 2) ss[x] += y[x][i] * y[x][i];
                }
            const double rq = q_scale / std::sqrt(ss[0] + ref::kKdaL2NormEps), rk = 1.0 / std::sqrt(ss[1] + ref::kKdaL2NormEps);
            for (int i = 0; i < K; ++i) {
                const size_t at = size_t(t) * HK + h * K + i;
                d.act[0][at] = float(y[0][i] * rq);
                d.act[1][at] = float(y[1][i] * rk);
                d.act[2][at] = float(y[2][i]);
                const float zz = bf16_to_float(d.z[at]) + w.dt_bias[h * K + i];
                d.act[3][at] = ref::kda_gate(zz, w.a_log[a_log_channel ? i : h], sc.lb);
            }
            d.beta[size_t(t) * H + h] = ref::sigmoid(bf16_to_float(d.beta_raw[size_t(t) * H + h]));
        }
    // Delta rule, token by token, in pieces ending at the snapshot positions.
    d.o.assign(size_t(T) * HK, 0.0);
    d.S_end = d.S0;
    std::vector<int> cuts;
    for (int p : snap_pos)
        if (p > d.start && p <= d.start + T) cuts.push_back(p - d.start);
    cuts.push_back(T);
    for (int h = 0; h < H; ++h) {
        float* S = d.S_end.data() + size_t(h) * K * K;
        int t0 = 0;
        for (int cut : cuts) {
            const int n = cut - t0;
            if (n > 0) {
                ref::DeltaRuleInputs in{ref::Matrix(n, K), ref::Matrix(n, K), ref::Matrix(n, K), ref::Matrix(n, K),
                                        std::vector<float>(n)};
                for (int r = 0; r < n; ++r) {
                    for (int i = 0; i < K; ++i) {
                        const size_t at = size_t(t0 + r) * HK + h * K + i;
                        in.q.at(r, i) = d.act[0][at];
                        in.k.at(r, i) = d.act[1][at];
                        in.v.at(r, i) = d.act[2][at];
                        in.g.at(r, i) = d.act[3][at];
                    }
                    in.beta[r] = d.beta[size_t(t0 + r) * H + h];
                }
                const ref::Matrix o = ref::delta_rule_recurrent(in, S);
                for (int r = 0; r < n; ++r)
                    for (int i = 0; i < K; ++i) d.o[size_t(t0 + r) * HK + h * K + i] = o.at(r, i);
            }
            t0 = cut;
            if (cut < T || snap_pos.count(d.start + cut)) {
                auto& snap = d.S_at[d.start + cut];
                snap.resize(size_t(H) * K * K);
                std::copy(S, S + size_t(K) * K, snap.begin() + size_t(h) * K * K);
            }
        }
    }
    // Gated output norm.
    d.out.assign(size_t(T) * HK, 0.0);
    std::vector<float> row(K), normed(K);
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
            for (int i = 0; i < K; ++i) row[i] = float(d.o[size_t(t) * HK + h * K + i]);
            ref::rmsnorm(row.data(), w.o_norm.data(), K, kNormEps, normed.data());
            for (int i = 0; i < K; ++i) {
                const size_t at = size_t(t) * HK + h * K + i;
                d.out[at] = double(normed[i]) * ref::sigmoid(bf16_to_float(d.gate[at]));
            }
        }
}

uint64_t round256(uint64_t b) { return (b + 255) / 256 * 256; }

class KdaCase final : public OpCase {
public:
    KdaCase(Mode mode, Scenario sc) : mode_(mode), sc_(std::move(sc)) { build(); }
    std::string family() const override { return family_of(mode_); }
    std::string name() const override { return fmt::format("{}: {}", family_of(mode_), sc_.name); }
    bool quick() const override { return sc_.quick; }

    void setup(test::TestBackend& b) override {
        runtime::Backend& be = *b.backend;
        const jit::Target target = be.kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
        arena_ = be.alloc(arena_image_.size());
        if (mode_ == Mode::layer) {
            model::layers::KdaLayerDims dims;
            dims.heads = sc_.H;
            dims.head_dim = sc_.K;
            dims.gate_lower_bound = sc_.lb;
            dims.norm_eps = kNormEps;
            dims.max_tokens = max_tokens_;
            autotune::KdaTuning tuning;
            tuning.decode_kernel = sc_.decode_kernel;
            layer_ = std::make_unique<model::layers::KdaLayer>(*b.disp, be, dims, layout_, 1, tuning);
        } else if (mode_ == Mode::prep) {
            kernel_ = &b.disp->get(jit::KdaPrepFamily::descriptor(sc_.K, target));
        } else if (mode_ == Mode::chunk) {
            kernel_ = &b.disp->get(jit::KdaChunkFamily::descriptor(sc_.K, target));
        } else if (mode_ == Mode::decode) {
            kernel_ = &b.disp->get(jit::KdaDecodeFamily::descriptor(sc_.K, target));
        } else {
            kernel_ = &b.disp->get(jit::KdaOutNormFamily::descriptor(sc_.K, target));
        }
        for (int i = 0; i < 3; ++i) conv_w_[i] = test::upload(be, w_.conv[i]);
        dt_bias_ = test::upload(be, w_.dt_bias);
        a_log_ = test::upload(be, w_.a_log);
        o_norm_ = test::upload(be, w_.o_norm);
        const bool raw = mode_ == Mode::layer || mode_ == Mode::prep, act = mode_ == Mode::chunk || mode_ == Mode::decode;
        const int f32_outs = mode_ == Mode::prep ? 5 : act ? 1 : 0;
        for (StepData& s : steps_) {
            if (raw) {
                for (int x = 0; x < 3; ++x) s.raw_d[x] = test::upload(be, s.raw[x]);
                s.z_d = test::upload(be, s.z);
                s.beta_d = test::upload(be, s.beta_raw);
            }
            s.gate_d = test::upload(be, s.gate);
            if (act) {
                for (int x = 0; x < 4; ++x) s.act_d[x] = test::upload(be, s.act[x]);
                s.actb_d = test::upload(be, s.beta);
            }
            if (mode_ == Mode::out_norm) s.o_in_d = test::upload(be, s.o_in);
            s.out_d = be.alloc(size_t(s.tokens) * HK() * 2);
            for (int x = 0; x < f32_outs; ++x) s.f32_out_d[x] = be.alloc(size_t(s.tokens) * (x == 4 ? sc_.H : HK()) * 4);
            s.staging = std::make_unique<model::forward::StepIndexStaging>();
        }
    }
    void poison(test::TestBackend& b) override {
        b.stream->upload(arena_.addr(), arena_image_.data(), arena_image_.size());
        for (StepData& s : steps_) {
            test::poison(*b.stream, s.out_d);
            for (auto& f : s.f32_out_d) test::poison(*b.stream, f);
        }
    }
    void run(test::TestBackend& b) override {
        for (StepData& s : steps_) {
            const kiln_params::StepIndex idx = s.staging->upload(s.index, arena_.addr(), arena_image_.size(),
                                                                 layout_.slot_bytes, 0, 1 << 20, *b.backend, *b.stream);
            run_step(b, s, idx);
        }
    }
    std::vector<std::string> check(test::TestBackend& b) override;
    void teardown(test::TestBackend&) override {
        layer_.reset();
        arena_.reset();
        for (auto& c : conv_w_) c.reset();
        dt_bias_.reset();
        a_log_.reset();
        o_norm_.reset();
        for (StepData& s : steps_) {
            for (auto& x : s.raw_d) x.reset();
            s.z_d.reset();
            s.beta_d.reset();
            s.gate_d.reset();
            for (auto& x : s.act_d) x.reset();
            s.actb_d.reset();
            s.o_in_d.reset();
            s.out_d.reset();
            for (auto& x : s.f32_out_d) x.reset();
        }
    }
    Cost cost() const override;

private:
    struct StepData {
        std::vector<StepSeq> seqs;
        model::forward::StepIndexHost index;
        int tokens = 0;
        std::vector<int> row_seq, row_off;  // packed row -> (sequence, offset from its start)
        std::vector<uint16_t> raw[3], z, beta_raw, gate;
        std::vector<float> act[4], beta, o_in;  // reference activations and o, packed (family inputs)
        std::vector<std::pair<int, int>> snaps;  // (position, slot) per sequence of the step, flattened below
        runtime::Buffer raw_d[3], z_d, beta_d, gate_d, act_d[4], actb_d, o_in_d, out_d, f32_out_d[5];
        std::unique_ptr<model::forward::StepIndexStaging> staging;
    };
    struct SnapRef {
        int seq, pos, slot;
    };
    int HK() const { return sc_.H * sc_.K; }
    void build();
    void make_forward_weights(std::mt19937_64& rng);
    void forward_reference(SeqData& d, std::mt19937_64& rng);
    void run_step(test::TestBackend& b, StepData& s, const kiln_params::StepIndex& idx);
    std::vector<std::string> compare_states(const std::vector<uint8_t>& arena) const;

    Mode mode_;
    Scenario sc_;
    Weights w_;
    std::vector<SeqData> data_;
    std::vector<StepData> steps_;
    std::vector<SnapRef> snaps_;
    model::forward::MemoryLayout layout_;
    std::vector<uint8_t> arena_image_;
    int max_tokens_ = 0;
    double alt_error_ = 0;  // per-channel A_log reading's output error (a_log_check)
    ref::KdaWeights kw_;    // hidden > 0: the whole layer's weights
    std::unique_ptr<model::layers::KdaLayer> layer_;
    const jit::LoadedKernel* kernel_ = nullptr;
    runtime::Buffer arena_, conv_w_[3], dt_bias_, a_log_, o_norm_;
};

void KdaCase::build() {
    const int H = sc_.H, K = sc_.K, HK = H * K;
    std::mt19937_64 rng(sc_.seed);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    auto nz = [&](float lo, float hi) {  // uniform in [lo, hi], never exactly zero
        float v;
        do v = lo + (hi - lo) * (0.5f + 0.5f * U(rng));
        while (v == 0.0f);
        return v;
    };
    for (int x = 0; x < 3; ++x) {
        w_.conv[x].resize(size_t(HK) * 4);
        for (auto& v : w_.conv[x]) v = nz(-0.6f, 0.6f);
    }
    w_.dt_bias.resize(HK);
    for (auto& v : w_.dt_bias) v = sc_.near_bound ? nz(3.0f, 6.0f) : nz(-1.0f, 1.0f);
    // Stored [max(K, H)] like the K3 checkpoint's [head_dim]: entry h is head h's; the rest differ.
    w_.a_log.resize(std::max(K, H));
    for (auto& v : w_.a_log) v = sc_.near_bound ? nz(0.5f, 1.5f) : nz(-1.5f, 1.0f);
    w_.o_norm.resize(K);
    for (auto& v : w_.o_norm) v = nz(0.5f, 1.5f);
    if (sc_.hidden > 0) make_forward_weights(rng);

    // Sequence lengths over all steps; snapshot positions.
    const int N = int(sc_.seqs.size());
    std::vector<int> total(N, 0);
    std::vector<std::set<int>> snap_pos(N);
    for (const auto& step : sc_.steps)
        for (const StepSeq& q : step) {
            total[q.seq] += q.n;
            for (int p : q.snaps) snap_pos[q.seq].insert(p);
        }
    data_.resize(N);
    for (int s = 0; s < N; ++s) {
        SeqData& d = data_[s];
        d.start = sc_.seqs[s].start;
        d.total = total[s];
        const size_t T = size_t(d.total);
        auto bf = [&](size_t n, float sd) {
            std::normal_distribution<float> nd(0.0f, sd);
            std::vector<uint16_t> v(n);
            for (auto& x : v) {
                do x = float_to_bf16(nd(rng));
                while (bf16_to_float(x) == 0.0f);
            }
            return v;
        };
        if (sc_.hidden == 0) {
            for (int x = 0; x < 3; ++x) d.raw[x] = bf(T * HK, 1.0f);
            d.z = bf(T * HK, 1.0f);
            d.beta_raw = bf(T * H, 1.5f);
            d.gate = bf(T * HK, 1.5f);
        }
        if (sc_.seqs[s].fresh) {
            d.S0.assign(size_t(H) * K * K, 0.0f);
            d.conv0.assign(size_t(3) * kHist * HK, 0);
        } else {
            d.S0.resize(size_t(H) * K * K);
            for (auto& v : d.S0) v = nz(-0.3f, 0.3f);
            d.conv0 = bf(size_t(3) * kHist * HK, 1.0f);
        }
        if (sc_.hidden > 0) forward_reference(d, rng);
        reference(sc_, w_, d, snap_pos[s], false);
    }

    // Layout: two KDA layers, the cases use the second.
    layout_.kda_heads = H;
    layout_.kda_head_dim = K;
    layout_.conv_size = 4;
    layout_.page_size = 1 << 20;
    uint64_t off = 0;
    for (int l = 0; l < 2; ++l) {
        layout_.kda_state_offset.push_back(off);
        off += round256(layout_.recurrent_bytes());
        layout_.kda_conv_offset.push_back(off);
        off += round256(layout_.conv_bytes());
    }
    layout_.slot_bytes = off;

    // Steps: batches, packed inputs, snapshot slots after the working slots.
    std::vector<int> pos(N);
    for (int s = 0; s < N; ++s) pos[s] = data_[s].start;
    int next_slot = N;
    for (const auto& step : sc_.steps)
        for (const StepSeq& q : step) next_slot += int(q.snaps.size());
    const int num_slots = next_slot;
    next_slot = N;
    for (const auto& step : sc_.steps) {
        StepData sd;
        sd.seqs = step;
        model::forward::ForwardBatch batch;
        for (const StepSeq& q : step) {
            model::forward::SequenceStep st;
            st.tokens.assign(q.n, 0);
            st.start = pos[q.seq];
            st.slot = q.seq;
            st.pages = {0};
            for (int p : q.snaps) {
                st.snapshots.push_back({p, next_slot});
                snaps_.push_back({q.seq, p, next_slot});
                ++next_slot;
            }
            batch.seqs.push_back(std::move(st));
            const SeqData& d = data_[q.seq];
            for (int r = 0; r < q.n; ++r) {
                const int o = pos[q.seq] - d.start + r;
                sd.row_seq.push_back(q.seq);
                sd.row_off.push_back(o);
                for (int x = 0; x < 3; ++x) sd.raw[x].insert(sd.raw[x].end(), d.raw[x].begin() + size_t(o) * HK, d.raw[x].begin() + size_t(o + 1) * HK);
                sd.z.insert(sd.z.end(), d.z.begin() + size_t(o) * HK, d.z.begin() + size_t(o + 1) * HK);
                sd.gate.insert(sd.gate.end(), d.gate.begin() + size_t(o) * HK, d.gate.begin() + size_t(o + 1) * HK);
                sd.beta_raw.insert(sd.beta_raw.end(), d.beta_raw.begin() + size_t(o) * H, d.beta_raw.begin() + size_t(o + 1) * H);
                for (int x = 0; x < 4; ++x) sd.act[x].insert(sd.act[x].end(), d.act[x].begin() + size_t(o) * HK, d.act[x].begin() + size_t(o + 1) * HK);
                sd.beta.insert(sd.beta.end(), d.beta.begin() + size_t(o) * H, d.beta.begin() + size_t(o + 1) * H);
                for (int i = 0; i < HK; ++i) sd.o_in.push_back(float(d.o[size_t(o) * HK + i]));
            }
            pos[q.seq] += q.n;
        }
        model::forward::StepLimits lim;
        lim.num_slots = num_slots;
        lim.num_pages = 1;
        lim.page_size = 1 << 20;
        sd.index = model::forward::build_step_index(batch, lim);
        sd.tokens = sd.index.num_tokens;
        max_tokens_ = std::max(max_tokens_, sd.tokens);
        steps_.push_back(std::move(sd));
    }

    // The arena before a run: working slots hold each sequence's prior state (this layer) and a byte pattern
    // (the other layer), snapshot slots the pattern and NaN bytes.
    arena_image_.assign(size_t(num_slots) * layout_.slot_bytes, 0x5A);
    for (int slot = N; slot < num_slots; ++slot) {
        uint8_t* base = arena_image_.data() + size_t(slot) * layout_.slot_bytes;
        std::fill_n(base + layout_.kda_state_offset[1], layout_.recurrent_bytes(), 0xFF);
        std::fill_n(base + layout_.kda_conv_offset[1], layout_.conv_bytes(), 0xFF);
    }
    for (int s = 0; s < N; ++s) {
        uint8_t* base = arena_image_.data() + size_t(s) * layout_.slot_bytes;
        std::memcpy(base + layout_.kda_state_offset[1], data_[s].S0.data(), data_[s].S0.size() * 4);
        std::memcpy(base + layout_.kda_conv_offset[1], data_[s].conv0.data(), data_[s].conv0.size() * 2);
    }

    if (sc_.a_log_check) {
        // The per-channel reading's output, against the per-head reference.
        double num = 0, den = 0;
        for (int s = 0; s < N; ++s) {
            SeqData alt = data_[s];
            reference(sc_, w_, alt, snap_pos[s], true);
            for (size_t i = 0; i < alt.out.size(); ++i) {
                num += (alt.out[i] - data_[s].out[i]) * (alt.out[i] - data_[s].out[i]);
                den += data_[s].out[i] * data_[s].out[i];
            }
        }
        alt_error_ = std::sqrt(num / den);
    }
}

void KdaCase::make_forward_weights(std::mt19937_64& rng) {
    const size_t d = size_t(sc_.hidden), H = size_t(sc_.H), K = size_t(sc_.K), W = H * K;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto mat = [&](size_t r, size_t c, float scale) {
        ref::Matrix m(r, c);
        for (auto& v : m.data) v = scale * nd(rng);
        return m;
    };
    const float in = 1.0f / std::sqrt(float(d));
    kw_.q_proj = mat(W, d, in);
    kw_.k_proj = mat(W, d, in);
    kw_.v_proj = mat(W, d, in);
    kw_.q_conv = ref::Matrix(W, 4, w_.conv[0]);
    kw_.k_conv = ref::Matrix(W, 4, w_.conv[1]);
    kw_.v_conv = ref::Matrix(W, 4, w_.conv[2]);
    kw_.f_a = mat(K, d, in);
    kw_.f_b = mat(W, K, 1.0f / std::sqrt(float(K)));
    kw_.dt_bias = w_.dt_bias;
    kw_.A_log = w_.a_log;
    kw_.b_proj = mat(H, d, 1.5f * in);
    kw_.g_proj = mat(W, d, 1.5f * in);
    kw_.o_norm = w_.o_norm;
    kw_.o_proj = mat(d, W, 1.0f / std::sqrt(float(W)));
}

// Inputs from x through the projections (rounded to bf16, as the projection GEMMs return them), and the
// model reference's output y and state for the same x and prior state.
void KdaCase::forward_reference(SeqData& d, std::mt19937_64& rng) {
    const int H = sc_.H, K = sc_.K, HK = H * K;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    ref::Matrix x(size_t(d.total), size_t(sc_.hidden));
    for (auto& v : x.data) v = nd(rng);
    auto to_bf16 = [](const ref::Matrix& m) {
        std::vector<uint16_t> b(m.data.size());
        for (size_t i = 0; i < b.size(); ++i) b[i] = float_to_bf16(m.data[i]);
        return b;
    };
    d.raw[0] = to_bf16(ref::linear(kw_.q_proj, x));
    d.raw[1] = to_bf16(ref::linear(kw_.k_proj, x));
    d.raw[2] = to_bf16(ref::linear(kw_.v_proj, x));
    d.z = to_bf16(ref::linear(kw_.f_b, ref::linear(kw_.f_a, x)));
    d.beta_raw = to_bf16(ref::linear(kw_.b_proj, x));
    d.gate = to_bf16(ref::linear(kw_.g_proj, x));
    ref::KdaDims dims;
    dims.hidden = size_t(sc_.hidden);
    dims.heads = size_t(H);
    dims.head_dim = size_t(K);
    dims.gate_lower_bound = sc_.lb;
    dims.norm_eps = kNormEps;
    kw_.validate(dims);
    ref::KdaState st = ref::KdaState::zeros(dims);
    for (int c = 0; c < 3; ++c)
        for (int r = 0; r < kHist; ++r)
            for (int ch = 0; ch < HK; ++ch) st.conv[c].at(r, ch) = bf16_to_float(d.conv0[(size_t(c) * kHist + r) * HK + ch]);
    st.S = d.S0;
    const ref::Matrix y = ref::kda_forward(kw_, dims, st, x, ref::KdaMode::recurrent);
    d.y.assign(y.data.begin(), y.data.end());
    d.S_forward = st.S;
}

void KdaCase::run_step(test::TestBackend& b, StepData& s, const kiln_params::StepIndex& idx) {
    const int H = sc_.H, K = sc_.K, HK = H * K;
    runtime::Stream& st = *b.stream;
    const auto loc = b.backend->location();
    if (mode_ == Mode::layer) {
        auto view = [&](const runtime::Buffer& buf, DType dt, int64_t cols) {
            return runtime::TensorView::contiguous(buf.data(), dt, {s.tokens, cols}, loc);
        };
        model::layers::KdaTensors t;
        t.q_raw = view(s.raw_d[0], DType::bf16, HK);
        t.k_raw = view(s.raw_d[1], DType::bf16, HK);
        t.v_raw = view(s.raw_d[2], DType::bf16, HK);
        t.z = view(s.z_d, DType::bf16, HK);
        t.beta_raw = view(s.beta_d, DType::bf16, H);
        t.gate = view(s.gate_d, DType::bf16, HK);
        t.out = view(s.out_d, DType::bf16, HK);
        t.q_conv = runtime::TensorView::contiguous(conv_w_[0].data(), DType::f32, {HK, 4}, loc);
        t.k_conv = runtime::TensorView::contiguous(conv_w_[1].data(), DType::f32, {HK, 4}, loc);
        t.v_conv = runtime::TensorView::contiguous(conv_w_[2].data(), DType::f32, {HK, 4}, loc);
        t.dt_bias = runtime::TensorView::contiguous(dt_bias_.data(), DType::f32, {HK}, loc);
        t.a_log = runtime::TensorView::contiguous(a_log_.data(), DType::f32, {int64_t(w_.a_log.size())}, loc);
        t.o_norm = runtime::TensorView::contiguous(o_norm_.data(), DType::f32, {K}, loc);
        layer_->run(layer_->plan(s.index), t, idx, st);
    } else if (mode_ == Mode::prep) {
        kiln_params::KdaPrepParams p{};
        p.idx = idx;
        p.q_raw = s.raw_d[0].as<const uint16_t>();
        p.k_raw = s.raw_d[1].as<const uint16_t>();
        p.v_raw = s.raw_d[2].as<const uint16_t>();
        p.z = s.z_d.as<const uint16_t>();
        p.beta_raw = s.beta_d.as<const uint16_t>();
        p.q_conv = conv_w_[0].as<const float>();
        p.k_conv = conv_w_[1].as<const float>();
        p.v_conv = conv_w_[2].as<const float>();
        p.dt_bias = dt_bias_.as<const float>();
        p.a_log = a_log_.as<const float>();
        p.q = s.f32_out_d[0].as<float>();
        p.k = s.f32_out_d[1].as<float>();
        p.v = s.f32_out_d[2].as<float>();
        p.g = s.f32_out_d[3].as<float>();
        p.beta = s.f32_out_d[4].as<float>();
        p.conv_offset = layout_.kda_conv_offset[1];
        p.raw_stride = HK;
        p.z_stride = HK;
        p.beta_stride = H;
        p.heads = H;
        p.lower_bound = sc_.lb.value_or(0.0f);
        p.softplus_gate = sc_.lb ? 0 : 1;
        jit::launch_kda_prep(*kernel_, st, p);
    } else if (mode_ == Mode::chunk || mode_ == Mode::decode) {
        auto fill = [&](auto& p) {
            p.idx = idx;
            p.q = s.act_d[0].as<const float>();
            p.k = s.act_d[1].as<const float>();
            p.v = s.act_d[2].as<const float>();
            p.g = s.act_d[3].as<const float>();
            p.beta = s.actb_d.as<const float>();
            p.o = s.f32_out_d[0].as<float>();
            p.state_offset = layout_.kda_state_offset[1];
            p.heads = H;
        };
        if (mode_ == Mode::chunk) {
            kiln_params::KdaChunkParams p{};
            fill(p);
            jit::launch_kda_chunk(*kernel_, st, p);
        } else {
            kiln_params::KdaDecodeParams p{};
            fill(p);
            jit::launch_kda_decode(*kernel_, st, p);
        }
    } else {
        kiln_params::KdaOutNormParams p{};
        p.o = s.o_in_d.as<const float>();
        p.gate = s.gate_d.as<const uint16_t>();
        p.o_norm = o_norm_.as<const float>();
        p.out = s.out_d.as<uint16_t>();
        p.gate_stride = HK;
        p.out_stride = HK;
        p.num_tokens = s.tokens;
        p.heads = H;
        p.eps = kNormEps;
        jit::launch_kda_out_norm(*kernel_, st, p);
    }
}

std::vector<std::string> KdaCase::compare_states(const std::vector<uint8_t>& arena) const {
    std::vector<std::string> bad;
    const int HK = sc_.H * sc_.K;
    auto state_at = [&](int slot) {
        std::vector<float> v(layout_.recurrent_bytes() / 4);
        std::memcpy(v.data(), arena.data() + size_t(slot) * layout_.slot_bytes + layout_.kda_state_offset[1], v.size() * 4);
        return v;
    };
    auto conv_at = [&](int slot) {
        std::vector<uint16_t> v(layout_.conv_bytes() / 2);
        std::memcpy(v.data(), arena.data() + size_t(slot) * layout_.slot_bytes + layout_.kda_conv_offset[1], v.size() * 2);
        return v;
    };
    auto f32_cmp = [&](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
        std::vector<double> w(want.begin(), want.end());
        const test::OutputError e = test::f32_error(got, w);
        if (!e.within(kTolState)) bad.push_back(fmt::format("{}: {} (bound {})", what, e.describe(), kTolState));
    };
    const bool state = mode_ == Mode::layer || mode_ == Mode::chunk || mode_ == Mode::decode;
    const bool conv = mode_ == Mode::layer || mode_ == Mode::prep;
    for (size_t s = 0; s < data_.size(); ++s) {
        if (state) f32_cmp(state_at(int(s)), data_[s].S_end, fmt::format("sequence {}: state after the steps", s));
        if (mode_ == Mode::layer && sc_.hidden > 0) {
            std::vector<double> w(data_[s].S_forward.begin(), data_[s].S_forward.end());
            const test::OutputError e = test::f32_error(state_at(int(s)), w);
            if (!e.within(kTolForward))
                bad.push_back(fmt::format("sequence {}: state against ref::kda_forward: {} (bound {})", s, e.describe(), kTolForward));
        }
        if (conv && conv_at(int(s)) != data_[s].conv_after(data_[s].total, HK))
            bad.push_back(fmt::format("sequence {}: conv state after the steps differs", s));
    }
    for (const SnapRef& sn : snaps_) {
        const SeqData& d = data_[sn.seq];
        if (state) f32_cmp(state_at(sn.slot), d.S_at.at(sn.pos), fmt::format("sequence {}: snapshot state at {}", sn.seq, sn.pos));
        if (conv && conv_at(sn.slot) != d.conv_after(sn.pos - d.start, HK))
            bad.push_back(fmt::format("sequence {}: snapshot conv state at {} differs", sn.seq, sn.pos));
    }
    // The other KDA layer's bytes of every slot.
    for (size_t slot = 0; slot * layout_.slot_bytes < arena.size(); ++slot) {
        const uint8_t* base = arena.data() + slot * layout_.slot_bytes;
        const size_t other = layout_.kda_state_offset[1];  // layer 0's region
        if (std::any_of(base, base + other, [](uint8_t b) { return b != 0x5A; })) {
            bad.push_back(fmt::format("slot {}: the other KDA layer's state was written", slot));
            break;
        }
    }
    return bad;
}

std::vector<std::string> KdaCase::check(test::TestBackend& b) {
    std::vector<std::string> bad;
    const int H = sc_.H, HK = sc_.H * sc_.K;
    const auto arena = test::download<uint8_t>(*b.backend, arena_, arena_image_.size());
    if (mode_ != Mode::out_norm) bad = compare_states(arena);
    for (size_t si = 0; si < steps_.size(); ++si) {
        const StepData& s = steps_[si];
        auto want = [&](auto pick, int cols) {
            std::vector<double> w;
            w.reserve(size_t(s.tokens) * cols);
            for (int r = 0; r < s.tokens; ++r) {
                const SeqData& d = data_[s.row_seq[r]];
                for (int c = 0; c < cols; ++c) w.push_back(pick(d, size_t(s.row_off[r]), c));
            }
            return w;
        };
        auto report = [&](const test::OutputError& e, double bound, const char* what) {
            if (!e.within(bound)) bad.push_back(fmt::format("step {}: {}: {} (bound {})", si, what, e.describe(), bound));
        };
        if (mode_ == Mode::layer || mode_ == Mode::out_norm) {
            const auto got = test::download<uint16_t>(*b.backend, s.out_d, size_t(s.tokens) * HK);
            const auto w = want([&](const SeqData& d, size_t o, int c) { return d.out[o * HK + c]; }, HK);
            const test::OutputError e = test::bf16_error(got, w);
            report(e, kTolOut, "output");
            if (sc_.hidden > 0) {
                // o_proj over the layer's output against ref::kda_forward (fp32 projections there, bf16 here).
                const size_t D = size_t(sc_.hidden);
                std::vector<float> y(size_t(s.tokens) * D);
                std::vector<float> row(HK);
                for (int r = 0; r < s.tokens; ++r) {
                    for (int c = 0; c < HK; ++c) row[c] = bf16_to_float(got[size_t(r) * HK + c]);
                    ref::matvec(kw_.o_proj, row.data(), y.data() + size_t(r) * D);
                }
                const auto wy = want([&](const SeqData& d, size_t o, int c) { return d.y[o * D + c]; }, int(D));
                report(test::f32_error(y, wy), kTolForward, "o_proj(output) against ref::kda_forward");
            }
            if (sc_.a_log_check && !(alt_error_ > 10 * kTolOut))
                bad.push_back(fmt::format("the per-channel A_log reading is only {:.3g} away: the case cannot tell it apart", alt_error_));
        }
        if (mode_ == Mode::chunk || mode_ == Mode::decode) {
            const auto got = test::download<float>(*b.backend, s.f32_out_d[0], size_t(s.tokens) * HK);
            report(test::f32_error(got, want([&](const SeqData& d, size_t o, int c) { return d.o[o * HK + c]; }, HK)), kTolO, "o");
        }
        if (mode_ == Mode::prep) {
            const char* names[4] = {"q", "k", "v", "g"};
            for (int x = 0; x < 4; ++x) {
                const auto got = test::download<float>(*b.backend, s.f32_out_d[x], size_t(s.tokens) * HK);
                report(test::f32_error(got, want([&](const SeqData& d, size_t o, int c) { return double(d.act[x][o * HK + c]); }, HK)),
                       kTolAct, names[x]);
            }
            const auto got = test::download<float>(*b.backend, s.f32_out_d[4], size_t(s.tokens) * H);
            report(test::f32_error(got, want([&](const SeqData& d, size_t o, int c) { return double(d.beta[o * H + c]); }, H)),
                   kTolAct, "beta");
        }
    }
    return bad;
}

Cost KdaCase::cost() const {
    const double H = sc_.H, K = sc_.K, HK = H * K, state = H * K * K * 4, conv = 3.0 * kHist * HK * 2;
    Cost c;
    for (const StepData& s : steps_) {
        const double T = s.tokens, seqs = s.index.num_seqs, snaps = s.index.num_snaps();
        double chunk_flops = 0, decode_flops = 0;
        for (const StepSeq& q : s.seqs) {
            if (q.n == 1) decode_flops += 7 * H * K * K;
            else chunk_flops += q.n * H * (6 * K * K + 5 * 64 * K);  // state passes plus the intra-chunk products
        }
        switch (mode_) {
            case Mode::layer:
                c.bytes += T * (6 * HK * 2 + H * 2) + seqs * (2 * state + 2 * conv) + snaps * (state + conv);
                c.flops += chunk_flops + decode_flops + T * HK * 40;
                break;
            case Mode::prep:
                c.bytes += T * (4 * HK * 2 + H * 2) + T * (4 * HK + H) * 4 + seqs * 2 * conv + snaps * conv;
                c.flops += T * HK * 40;
                break;
            case Mode::chunk:
            case Mode::decode:
                c.bytes += T * (5 * HK + H) * 4 + seqs * 2 * state + snaps * state;
                c.flops += chunk_flops + decode_flops;
                break;
            case Mode::out_norm:
                c.bytes += T * HK * (4 + 2 + 2);
                c.flops += T * HK * 8;
                break;
        }
    }
    return c;
}

// Snapshot positions (multiples of 64) in (start, start + n].
std::vector<int> grid_snaps(int start, int n, int every = 64) {
    std::vector<int> v;
    for (int p = (start / every + 1) * every; p <= start + n; p += every) v.push_back(p);
    return v;
}

Scenario one_step(std::string name, int H, int K, std::vector<SeqSpec> seqs, std::vector<int> lens, bool snaps, uint64_t seed) {
    Scenario sc;
    sc.name = std::move(name);
    sc.H = H;
    sc.K = K;
    sc.seed = seed;
    sc.seqs = std::move(seqs);
    std::vector<StepSeq> step;
    for (size_t i = 0; i < lens.size(); ++i)
        step.push_back({int(i), lens[i], snaps ? grid_snaps(sc.seqs[i].start, lens[i]) : std::vector<int>{}});
    sc.steps.push_back(std::move(step));
    return sc;
}

// A prefill batch: a fresh sequence, one continuing off the chunk grid, one short.
Scenario prefill_batch(int K, uint64_t seed) {
    return one_step(fmt::format("prefill batch K={}", K), 2, K, {{0, true}, {100, false}, {61, false}}, {200, 157, 5}, true, seed);
}

// A mixed batch: decodes (one lands on a snapshot position) and prefill chunks.
Scenario mixed_batch(int K, uint64_t seed) {
    return one_step(fmt::format("mixed decode + prefill K={}", K), 3, K,
                    {{63, false}, {0, true}, {17, false}, {300, false}, {64, false}}, {1, 130, 1, 70, 1}, true, seed);
}

Scenario decode_batch(int B, int H, int K, bool quick, uint64_t seed) {
    std::vector<SeqSpec> seqs;
    std::vector<int> lens;
    for (int i = 0; i < B; ++i) {
        seqs.push_back({i % 5 == 0 ? 127 : 200 + 7 * i, false});  // some decodes end on a snapshot position
        lens.push_back(1);
    }
    Scenario sc = one_step(fmt::format("decode B={} H={} K={}", B, H, K), H, K, seqs, lens, true, seed);
    sc.quick = quick;
    return sc;
}

// One sequence of `total` tokens from `start`, in the given pieces (one step each); snapshots every 64.
Scenario pieces(std::string name, int H, int K, int start, bool fresh, std::vector<int> parts, uint64_t seed,
                int snap_every = 64) {
    Scenario sc;
    sc.name = std::move(name);
    sc.H = H;
    sc.K = K;
    sc.seed = seed;
    sc.seqs = {{start, fresh}};
    int pos = start;
    for (int n : parts) {
        sc.steps.push_back({{0, n, grid_snaps(pos, n, snap_every)}});
        pos += n;
    }
    return sc;
}

}  // namespace

void add_kda_prep_cases(CaseList& out) {
    out.push_back(std::make_unique<KdaCase>(Mode::prep, prefill_batch(128, 11)));
    out.push_back(std::make_unique<KdaCase>(Mode::prep, mixed_batch(32, 12)));
    Scenario sp = mixed_batch(64, 13);
    sp.name += ", softplus gate";
    sp.lb.reset();
    out.push_back(std::make_unique<KdaCase>(Mode::prep, sp));
}

void add_kda_chunk_cases(CaseList& out) {
    out.push_back(std::make_unique<KdaCase>(Mode::chunk, prefill_batch(128, 21)));
    out.push_back(std::make_unique<KdaCase>(Mode::chunk, prefill_batch(32, 22)));
    Scenario nb = prefill_batch(64, 23);
    nb.name += ", gates near the -5 bound";
    nb.near_bound = true;
    out.push_back(std::make_unique<KdaCase>(Mode::chunk, nb));
    Scenario sp = prefill_batch(64, 24);
    sp.name += ", softplus gate";
    sp.lb.reset();
    out.push_back(std::make_unique<KdaCase>(Mode::chunk, sp));
    // Single-token sequences through the chunk form.
    out.push_back(std::make_unique<KdaCase>(Mode::chunk, decode_batch(4, 2, 64, true, 25)));
}

void add_kda_decode_cases(CaseList& out) {
    out.push_back(std::make_unique<KdaCase>(Mode::decode, decode_batch(1, 12, 128, true, 31)));
    out.push_back(std::make_unique<KdaCase>(Mode::decode, decode_batch(9, 3, 32, true, 32)));
    Scenario nb = decode_batch(6, 2, 128, true, 33);
    nb.name += ", gates near the -5 bound";
    nb.near_bound = true;
    out.push_back(std::make_unique<KdaCase>(Mode::decode, nb));
    out.push_back(std::make_unique<KdaCase>(Mode::decode, decode_batch(256, 12, 128, false, 34)));
}

void add_kda_out_norm_cases(CaseList& out) {
    out.push_back(std::make_unique<KdaCase>(Mode::out_norm, mixed_batch(128, 41)));
    out.push_back(std::make_unique<KdaCase>(Mode::out_norm, prefill_batch(32, 42)));
}

void add_kda_cases(CaseList& out) {
    out.push_back(std::make_unique<KdaCase>(Mode::layer, mixed_batch(128, 51)));
    Scenario all_chunk = mixed_batch(64, 52);
    all_chunk.name += ", every sequence through the chunk form";
    all_chunk.decode_kernel = false;
    out.push_back(std::make_unique<KdaCase>(Mode::layer, all_chunk));
    Scenario nb = prefill_batch(128, 53);
    nb.name += ", gates near the -5 bound";
    nb.near_bound = true;
    out.push_back(std::make_unique<KdaCase>(Mode::layer, nb));
    Scenario sp = mixed_batch(64, 54);
    sp.name += ", softplus gate (Kimi-Linear)";
    sp.lb.reset();
    out.push_back(std::make_unique<KdaCase>(Mode::layer, sp));
    Scenario al = prefill_batch(64, 55);
    al.name += ", A_log read per head";
    al.a_log_check = true;
    out.push_back(std::make_unique<KdaCase>(Mode::layer, al));
    // The same 300 tokens (from position 10, continuing a prior state) whole, and in pieces across steps
    // (prefill chunks, decodes, a chunk ending on the grid): both against one token-by-token reference.
    out.push_back(std::make_unique<KdaCase>(Mode::layer, pieces("300 tokens in one step", 2, 64, 10, false, {300}, 56)));
    out.push_back(std::make_unique<KdaCase>(
        Mode::layer, pieces("300 tokens in steps of 100, 1, 1, 72, 126", 2, 64, 10, false, {100, 1, 1, 72, 126}, 56)));
    out.push_back(std::make_unique<KdaCase>(Mode::layer, pieces("1000 tokens, fresh", 4, 128, 0, true, {1000}, 57)));
    // The whole layer (with the projections around it) against the model reference, over two steps.
    for (bool softplus : {false, true}) {
        Scenario fw = pieces(softplus ? "against ref::kda_forward, softplus gate" : "against ref::kda_forward", 2, 32, 7,
                             false, {90, 1, 60}, 59);
        fw.hidden = 96;
        if (softplus) fw.lb.reset();
        out.push_back(std::make_unique<KdaCase>(Mode::layer, fw));
    }
    Scenario longc = pieces("8192 tokens, 12 heads", 12, 128, 0, true, {8192}, 58, 2048);
    longc.quick = false;
    out.push_back(std::make_unique<KdaCase>(Mode::layer, longc));
}

}  // namespace kiln::ops
