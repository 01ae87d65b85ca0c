// Op cases of the MLA families, each against a plain fp64 loop over the same bf16 inputs (the whole layer is
// checked against model/reference/mla in mla_layer.cpp):
//   mla_cache_append  rows land byte-exact in their page slots (page sizes 1, 16, 64), nothing else changes
//   mla_absorb        q: W_UKᵀ q_nope with the rope part copied; out: W_UV ō, with and without the gate;
//                     relative L2 <= 8e-3 (fp32 sums, one bf16 rounding)
//   mla_decode        single tokens over long paged contexts, whole and in pieces (+ mla_combine)
//   mla_prefill       chunks continuing cached prefixes, fresh chunks and single tokens in one launch, causal
//   mla_combine       random pieces merged by their log-sum-exp
// The attention cases compare the latent output ō with relative L2 <= 1e-2 (a convex combination of bf16
// rows in fp32, one rounding); the K3-sized device cases check a sample of (token, head) rows.
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "jit/families/mla_absorb.hpp"
#include "jit/families/mla_cache_append.hpp"
#include "jit/families/mla_combine.hpp"
#include "jit/families/mla_decode.hpp"
#include "jit/families/mla_prefill.hpp"
#include "tests/common/tolerance.hpp"
#include "tests/ops/cases.hpp"
#include "tests/ops/mla_problem.hpp"

namespace kiln::ops {

namespace {

using mla_test::PagedCache;
using mla_test::SeqSpec;
using mla_test::Step;
using runtime::bf16_to_float;

std::vector<int> lengths_of(const std::vector<SeqSpec>& seqs) {
    std::vector<int> v;
    for (const SeqSpec& s : seqs) v.push_back(s.start + s.tokens);
    return v;
}

int total_tokens(const std::vector<SeqSpec>& seqs) {
    int t = 0;
    for (const SeqSpec& s : seqs) t += s.tokens;
    return t;
}

std::string seqs_text(const std::vector<SeqSpec>& seqs) {
    if (seqs.size() > 6) {
        int ctx = 0, tokens = 0;
        for (const SeqSpec& q : seqs) ctx = std::max(ctx, q.start + q.tokens), tokens += q.tokens;
        return fmt::format("{} seqs, {} new tokens, contexts up to {}", seqs.size(), tokens, ctx);
    }
    std::string s;
    for (size_t i = 0; i < seqs.size(); ++i) s += fmt::format("{}{}+{}", i ? "," : "", seqs[i].start, seqs[i].tokens);
    return s;
}

// ---- mla_cache_append ------------------------------------------------------------------------------------

class CacheAppendCase final : public OpCase {
public:
    CacheAppendCase(int page_size, int d_c, int d_r, std::vector<SeqSpec> seqs)
        : ps_(page_size), dc_(d_c), dr_(d_r), seqs_(std::move(seqs)), kv_(page_size, d_c + d_r, lengths_of(seqs_), 3) {
        const int cd = dc_ + dr_;
        T_ = total_tokens(seqs_);
        // cached rows: random, and they must stay as they are
        for (size_t s = 0; s < seqs_.size(); ++s)
            for (int j = 0; j < seqs_[s].start; ++j) {
                const auto r = test::random_bf16(size_t(cd), 1000 + s * 7919 + size_t(j));
                std::copy(r.begin(), r.end(), kv_.row(int(s), j));
            }
        // the new rows as kv_a writes them: [T, d_c + d_r], latent then rope (two strided views)
        rows_ = test::random_bf16(size_t(T_) * cd, 77);
        want_ = kv_.image;
        int t = 0;
        for (size_t s = 0; s < seqs_.size(); ++s)
            for (int i = 0; i < seqs_[s].tokens; ++i, ++t)
                std::copy_n(rows_.data() + size_t(t) * cd, cd,
                            reinterpret_cast<uint16_t*>(want_.data() + kv_.row_offset(int(s), seqs_[s].start + i)));
        step_.build(seqs_, kv_);
    }
    std::string family() const override { return "mla_cache_append"; }
    std::string name() const override {
        return fmt::format("mla_cache_append: page size {}, d_c {} + d_r {}, seqs {}", ps_, dc_, dr_, seqs_text(seqs_));
    }
    void setup(test::TestBackend& b) override {
        k_ = &b.disp->get(jit::MlaCacheAppendFamily::descriptor(mla_test::target_of(b)));
        arena_ = test::upload(*b.backend, kv_.image);
        rows_d_ = test::upload(*b.backend, rows_);
        step_.upload(b, arena_, kv_);
    }
    void poison(test::TestBackend& b) override { b.stream->upload(arena_.addr(), kv_.image.data(), kv_.image.size()); }
    void run(test::TestBackend& b) override {
        kiln_params::mla::CacheAppendParams p{};
        p.idx = step_.dev;
        p.latent = rows_d_.as<const uint16_t>();
        p.k_rope = rows_d_.as<const uint16_t>() + dc_;
        p.layer_offset = kv_.layout.mla_offset[1];
        p.latent_stride = p.rope_stride = dc_ + dr_;
        p.d_c = dc_;
        p.d_r = dr_;
        jit::launch_mla_cache_append(*k_, *b.stream, p);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const auto got = test::download<uint8_t>(*b.backend, arena_, want_.size());
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want_[i];
        if (bad == 0) return {};
        return {fmt::format("{} of {} arena bytes differ from the expected pages", bad, got.size())};
    }
    void teardown(test::TestBackend&) override {
        arena_.reset();
        rows_d_.reset();
    }
    Cost cost() const override { return {4.0 * T_ * (dc_ + dr_), 0}; }

private:
    int ps_, dc_, dr_, T_ = 0;
    std::vector<SeqSpec> seqs_;
    PagedCache kv_;
    Step step_;
    std::vector<uint16_t> rows_;
    std::vector<uint8_t> want_;
    const jit::LoadedKernel* k_ = nullptr;
    runtime::Buffer arena_, rows_d_;
};

// ---- mla_absorb ------------------------------------------------------------------------------------------

class AbsorbCase final : public OpCase {
public:
    AbsorbCase(jit::MlaAbsorbMode mode, bool gate, int tokens, int heads, int d_n, int d_r, int d_v, int d_c)
        : mode_(mode), gate_(gate), T_(tokens), H_(heads), dn_(d_n), dr_(d_r), dv_(d_v), dc_(d_c) {
        kv_b_ = test::random_bf16(size_t(H_) * (dn_ + dv_) * dc_, 5, 1.0f / std::sqrt(float(dn_)));
        const bool q = mode_ == jit::MlaAbsorbMode::q;
        x_cols_ = q ? H_ * (dn_ + dr_) : H_ * dc_;
        y_cols_ = q ? H_ * (dc_ + dr_) : H_ * dv_;
        x_ = test::random_bf16(size_t(T_) * x_cols_, 6);
        if (gate_) g_ = test::random_bf16(size_t(T_) * y_cols_, 7, 2.0f);
        want_.assign(size_t(T_) * y_cols_, 0.0);
        const auto w = [&](int h, int row, int c) { return double(bf16_to_float(kv_b_[(size_t(h) * (dn_ + dv_) + row) * dc_ + c])); };
        for (int t = 0; t < T_; ++t)
            for (int h = 0; h < H_; ++h) {
                if (q) {
                    const uint16_t* qh = x_.data() + size_t(t) * x_cols_ + size_t(h) * (dn_ + dr_);
                    double* y = want_.data() + size_t(t) * y_cols_ + size_t(h) * (dc_ + dr_);
                    for (int c = 0; c < dc_; ++c) {
                        double s = 0;
                        for (int n = 0; n < dn_; ++n) s += w(h, n, c) * bf16_to_float(qh[n]);
                        y[c] = s;
                    }
                    for (int r = 0; r < dr_; ++r) y[dc_ + r] = bf16_to_float(qh[dn_ + r]);
                } else {
                    const uint16_t* ob = x_.data() + size_t(t) * x_cols_ + size_t(h) * dc_;
                    for (int j = 0; j < dv_; ++j) {
                        double s = 0;
                        for (int c = 0; c < dc_; ++c) s += w(h, dn_ + j, c) * bf16_to_float(ob[c]);
                        const size_t o = size_t(t) * y_cols_ + size_t(h) * dv_ + j;
                        if (gate_) s *= 1.0 / (1.0 + std::exp(-double(bf16_to_float(g_[o]))));
                        want_[o] = s;
                    }
                }
            }
    }
    std::string family() const override { return "mla_absorb"; }
    std::string name() const override {
        return fmt::format("mla_absorb {}{}: {} tokens, {} heads, d_n {}, d_r {}, d_v {}, d_c {}",
                           mode_ == jit::MlaAbsorbMode::q ? "q" : "out", gate_ ? " gated" : "", T_, H_, dn_, dr_, dv_, dc_);
    }
    void setup(test::TestBackend& b) override {
        k_ = &b.disp->get(jit::MlaAbsorbFamily::descriptor(mode_, mla_test::target_of(b)));
        kv_b_d_ = test::upload(*b.backend, kv_b_);
        x_d_ = test::upload(*b.backend, x_);
        if (gate_) g_d_ = test::upload(*b.backend, g_);
        y_d_ = b.backend->alloc(size_t(T_) * y_cols_ * 2);
    }
    void poison(test::TestBackend& b) override { test::poison(*b.stream, y_d_); }
    void run(test::TestBackend& b) override {
        kiln_params::mla::AbsorbParams p{};
        p.x = x_d_.as<const uint16_t>();
        p.kv_b = kv_b_d_.as<const uint16_t>();
        p.gate = gate_ ? g_d_.as<const uint16_t>() : nullptr;
        p.y = y_d_.as<uint16_t>();
        p.num_tokens = T_;
        p.heads = H_;
        p.x_stride = x_cols_;
        p.out_stride = y_cols_;
        p.d_n = dn_;
        p.d_r = dr_;
        p.d_v = dv_;
        p.d_c = dc_;
        jit::launch_mla_absorb(*k_, *b.stream, p);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const auto got = test::download<uint16_t>(*b.backend, y_d_, want_.size());
        const test::OutputError e = test::bf16_error(got, want_);
        if (e.within(8e-3)) return {};
        return {e.describe()};
    }
    void teardown(test::TestBackend&) override {
        kv_b_d_.reset();
        x_d_.reset();
        g_d_.reset();
        y_d_.reset();
    }
    Cost cost() const override {
        const bool q = mode_ == jit::MlaAbsorbMode::q;
        const double w = double(H_) * (q ? dn_ : dv_) * dc_ * 2;
        return {w + 2.0 * T_ * (x_cols_ + y_cols_ * (gate_ ? 2 : 1)), 2.0 * T_ * H_ * (q ? dn_ : dv_) * dc_};
    }

private:
    jit::MlaAbsorbMode mode_;
    bool gate_;
    int T_, H_, dn_, dr_, dv_, dc_, x_cols_ = 0, y_cols_ = 0;
    std::vector<uint16_t> kv_b_, x_, g_;
    std::vector<double> want_;
    const jit::LoadedKernel* k_ = nullptr;
    runtime::Buffer kv_b_d_, x_d_, g_d_, y_d_;
};

// ---- mla_decode / mla_prefill (+ mla_combine when split) ---------------------------------------------------

struct AttnSpec {
    const char* family;  // mla_decode or mla_prefill
    int page_size, heads, d_c, d_r;
    std::vector<SeqSpec> seqs;
    int split_keys;     // 0: one piece for every token
    bool quick = true;
    bool device_only = false;  // K3-sized: the host target's reference would take too long
    int cfg_a = 0, cfg_b = 0;  // device CTA shape (0: the family's default)
    bool mma = false;          // device: the tensor-core kernel
};

class AttentionCase final : public OpCase {
public:
    explicit AttentionCase(AttnSpec spec) : s_(std::move(spec)) {
        T_ = total_tokens(s_.seqs);
        int max_kv = 0;
        for (const SeqSpec& q : s_.seqs) max_kv = std::max(max_kv, q.start + q.tokens);
        split_keys_ = s_.split_keys ? s_.split_keys : (max_kv + 63) / 64 * 64;
        splits_ = (max_kv + split_keys_ - 1) / split_keys_;
        const int cd = s_.d_c + s_.d_r;
        for (const SeqSpec& q : s_.seqs) kv_bytes_ += double(q.start + q.tokens) * cd * 2;
        for (const SeqSpec& q : s_.seqs)
            for (int i = 0; i < q.tokens; ++i) flops_ += double(q.start + i + 1) * s_.heads * 2 * (cd + s_.d_c);
    }
    // The data and the reference, made on first use (the device-only cases hold gigabytes of cache).
    void prepare() {
        if (kv_) return;
        const int cd = s_.d_c + s_.d_r;
        kv_ = std::make_unique<PagedCache>(s_.page_size, cd, lengths_of(s_.seqs), 11);
        for (size_t s = 0; s < s_.seqs.size(); ++s) {
            const int len = s_.seqs[s].start + s_.seqs[s].tokens;
            const auto r = test::random_bf16(size_t(len) * cd, 2000 + s);
            for (int j = 0; j < len; ++j) std::copy_n(r.data() + size_t(j) * cd, cd, kv_->row(int(s), j));
        }
        q_ = test::random_bf16(size_t(T_) * s_.heads * cd, 12);
        step_.build(s_.seqs, *kv_);
        // reference rows: all of them, or (device-only cases) heads 0, H/2 and H-1 of every fourth token
        const double scale = 1.0 / std::sqrt(192.0);
        int t = 0;
        for (size_t s = 0; s < s_.seqs.size(); ++s)
            for (int i = 0; i < s_.seqs[s].tokens; ++i, ++t) {
                if (s_.device_only && t % 4 != 0) continue;
                const int pos = s_.seqs[s].start + i;
                std::vector<int> heads;
                if (s_.device_only) heads = {0, s_.heads / 2, s_.heads - 1};
                else
                    for (int h = 0; h < s_.heads; ++h) heads.push_back(h);
                for (int h : heads) {
                    const uint16_t* q = q_.data() + (size_t(t) * s_.heads + h) * cd;
                    std::vector<double> qd(static_cast<size_t>(cd));
                    for (int c = 0; c < cd; ++c) qd[size_t(c)] = bf16_to_float(q[c]);
                    std::vector<double> sc(size_t(pos) + 1);
                    double mx = -1e300;
                    for (int j = 0; j <= pos; ++j) {
                        const uint16_t* row = kv_->row(int(s), j);
                        double d = 0;
                        for (int c = 0; c < cd; ++c) d += qd[size_t(c)] * bf16_to_float(row[c]);
                        sc[size_t(j)] = d * scale;
                        mx = std::max(mx, sc[size_t(j)]);
                    }
                    double sum = 0;
                    for (double& v : sc) sum += (v = std::exp(v - mx));
                    std::vector<double> o(size_t(s_.d_c), 0.0);
                    for (int j = 0; j <= pos; ++j) {
                        const uint16_t* row = kv_->row(int(s), j);
                        const double w = sc[size_t(j)] / sum;
                        for (int c = 0; c < s_.d_c; ++c) o[size_t(c)] += w * bf16_to_float(row[c]);
                    }
                    ref_rows_.push_back((size_t(t) * s_.heads + h));
                    want_.insert(want_.end(), o.begin(), o.end());
                }
            }
    }
    std::string family() const override { return s_.family; }
    std::string name() const override {
        return fmt::format("{}{}: {} heads, d_c {} + d_r {}, page size {}, {} piece(s) of {}{}, seqs {}", s_.family,
                           s_.mma ? " mma" : "", s_.heads, s_.d_c, s_.d_r, s_.page_size, splits_, split_keys_,
                           s_.cfg_b || s_.cfg_a ? fmt::format(", cta {}x{}", s_.cfg_a, s_.cfg_b) : "", seqs_text(s_.seqs));
    }
    bool runs_on(const test::TestBackend& b) const override {
        return !s_.device_only || b.backend->kind() == runtime::BackendKind::cuda;
    }
    bool quick() const override { return s_.quick; }
    void setup(test::TestBackend& b) override {
        prepare();
        const jit::Target t = mla_test::target_of(b);
        prefill_ = std::string(s_.family) == "mla_prefill";
        k_ = prefill_ ? &b.disp->get(jit::MlaPrefillFamily::descriptor(s_.d_c, s_.d_r, t, s_.cfg_a, s_.cfg_b, s_.mma))
                      : &b.disp->get(jit::MlaDecodeFamily::descriptor(s_.d_c, s_.d_r, t, s_.cfg_b, s_.mma));
        combine_ = &b.disp->get(jit::MlaCombineFamily::descriptor(t));
        arena_ = test::upload(*b.backend, kv_->image);
        q_d_ = test::upload(*b.backend, q_);
        out_ = b.backend->alloc(size_t(T_) * s_.heads * s_.d_c * 2);
        if (splits_ > 1) {
            part_o_ = b.backend->alloc(size_t(T_) * s_.heads * splits_ * s_.d_c * 4);
            part_lse_ = b.backend->alloc(size_t(T_) * s_.heads * splits_ * 4);
        }
        step_.upload(b, arena_, *kv_);
    }
    void poison(test::TestBackend& b) override {
        test::poison(*b.stream, out_);
        test::poison(*b.stream, part_o_);
        test::poison(*b.stream, part_lse_);
    }
    void run(test::TestBackend& b) override {
        kiln_params::mla::AttentionParams p{};
        p.idx = step_.dev;
        p.q = q_d_.as<const uint16_t>();
        p.out = out_.as<uint16_t>();
        p.part_o = part_o_ ? part_o_.as<float>() : nullptr;
        p.part_lse = part_lse_ ? part_lse_.as<float>() : nullptr;
        p.layer_offset = kv_->layout.mla_offset[1];
        p.scale = static_cast<float>(1.0 / std::sqrt(192.0));
        p.heads = s_.heads;
        p.splits = splits_;
        p.split_keys = split_keys_;
        p.only = 0;
        if (prefill_) jit::launch_mla_prefill(*k_, *b.stream, p);
        else jit::launch_mla_decode(*k_, *b.stream, p);
        if (splits_ > 1) {
            kiln_params::mla::CombineParams c{};
            c.token_pos = step_.dev.token_pos;
            c.part_o = p.part_o;
            c.part_lse = p.part_lse;
            c.out = p.out;
            c.num_tokens = T_;
            c.heads = s_.heads;
            c.splits = splits_;
            c.split_keys = split_keys_;
            c.d_c = s_.d_c;
            jit::launch_mla_combine(*combine_, *b.stream, c);
        }
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const auto all = test::download<uint16_t>(*b.backend, out_, size_t(T_) * s_.heads * s_.d_c);
        std::vector<uint16_t> got;
        for (size_t r : ref_rows_) got.insert(got.end(), all.begin() + long(r * s_.d_c), all.begin() + long((r + 1) * s_.d_c));
        long nonfinite = 0;
        for (uint16_t v : all) nonfinite += !std::isfinite(bf16_to_float(v));
        const test::OutputError e = test::bf16_error(got, want_);
        std::vector<std::string> out;
        if (!e.within(1e-2)) out.push_back(e.describe());
        if (nonfinite) out.push_back(fmt::format("{} non-finite outputs (rows never written?)", nonfinite));
        return out;
    }
    void teardown(test::TestBackend&) override {
        arena_.reset();
        q_d_.reset();
        out_.reset();
        part_o_.reset();
        part_lse_.reset();
    }
    Cost cost() const override {
        const double io = double(T_) * s_.heads * (s_.d_c + s_.d_r + s_.d_c) * 2;
        return {kv_bytes_ + io, flops_};
    }

private:
    AttnSpec s_;
    std::unique_ptr<PagedCache> kv_;
    Step step_;
    int T_ = 0, splits_ = 1, split_keys_ = 64;
    bool prefill_ = false;
    std::vector<uint16_t> q_;
    std::vector<size_t> ref_rows_;
    std::vector<double> want_;
    double kv_bytes_ = 0, flops_ = 0;
    const jit::LoadedKernel *k_ = nullptr, *combine_ = nullptr;
    runtime::Buffer arena_, q_d_, out_, part_o_, part_lse_;
};

// ---- mla_combine -----------------------------------------------------------------------------------------

class CombineCase final : public OpCase {
public:
    CombineCase(int heads, int d_c, std::vector<int> positions, int split_keys)
        : H_(heads), dc_(d_c), pos_(std::move(positions)), sk_(split_keys) {
        T_ = int(pos_.size());
        for (int p : pos_) S_ = std::max(S_, (p + sk_) / sk_);
        const size_t rows = size_t(T_) * H_ * S_;
        part_o_ = test::random_f32(rows * dc_, 21, -2.0f, 2.0f);
        part_lse_ = test::random_f32(rows, 22, -4.0f, 4.0f);
        // single-piece tokens keep what the attention wrote: here a known row
        out_init_ = test::random_bf16(size_t(T_) * H_ * dc_, 23);
        want_.resize(out_init_.size());
        for (int t = 0; t < T_; ++t)
            for (int h = 0; h < H_; ++h) {
                const size_t r = size_t(t) * H_ + h;
                const int n = (pos_[size_t(t)] + sk_) / sk_;
                for (int c = 0; c < dc_; ++c) {
                    if (n == 1) {
                        want_[r * dc_ + c] = bf16_to_float(out_init_[r * dc_ + c]);
                        continue;
                    }
                    double mx = -1e300, num = 0, den = 0;
                    for (int i = 0; i < n; ++i) mx = std::max(mx, double(part_lse_[r * S_ + i]));
                    for (int i = 0; i < n; ++i) {
                        const double w = std::exp(double(part_lse_[r * S_ + i]) - mx);
                        num += w * part_o_[(r * S_ + i) * dc_ + c];
                        den += w;
                    }
                    want_[r * dc_ + c] = num / den;
                }
            }
    }
    std::string family() const override { return "mla_combine"; }
    std::string name() const override {
        return fmt::format("mla_combine: {} tokens, {} heads, d_c {}, pieces of {} (up to {})", T_, H_, dc_, sk_, S_);
    }
    void setup(test::TestBackend& b) override {
        k_ = &b.disp->get(jit::MlaCombineFamily::descriptor(mla_test::target_of(b)));
        pos_d_ = test::upload(*b.backend, pos_);
        o_d_ = test::upload(*b.backend, part_o_);
        lse_d_ = test::upload(*b.backend, part_lse_);
        out_ = b.backend->alloc(out_init_.size() * 2);
    }
    void poison(test::TestBackend& b) override { b.stream->upload(out_.addr(), out_init_.data(), out_init_.size() * 2); }
    void run(test::TestBackend& b) override {
        kiln_params::mla::CombineParams p{};
        p.token_pos = pos_d_.as<const int32_t>();
        p.part_o = o_d_.as<const float>();
        p.part_lse = lse_d_.as<const float>();
        p.out = out_.as<uint16_t>();
        p.num_tokens = T_;
        p.heads = H_;
        p.splits = S_;
        p.split_keys = sk_;
        p.d_c = dc_;
        jit::launch_mla_combine(*k_, *b.stream, p);
    }
    std::vector<std::string> check(test::TestBackend& b) override {
        const test::OutputError e = test::bf16_error(test::download<uint16_t>(*b.backend, out_, want_.size()), want_);
        if (e.within(8e-3)) return {};
        return {e.describe()};
    }
    void teardown(test::TestBackend&) override {
        pos_d_.reset();
        o_d_.reset();
        lse_d_.reset();
        out_.reset();
    }
    Cost cost() const override {
        double pieces = 0;
        for (int p : pos_) pieces += (p + sk_) / sk_;
        return {pieces * H_ * (dc_ + 1) * 4 + double(T_) * H_ * dc_ * 2, 2 * pieces * H_ * dc_};
    }

private:
    int H_, dc_;
    std::vector<int32_t> pos_;
    int sk_, T_ = 0, S_ = 1;
    std::vector<float> part_o_, part_lse_;
    std::vector<uint16_t> out_init_;
    std::vector<double> want_;
    const jit::LoadedKernel* k_ = nullptr;
    runtime::Buffer pos_d_, o_d_, lse_d_, out_;
};

std::vector<SeqSpec> decodes(int n, int ctx) {
    std::vector<SeqSpec> v;
    for (int i = 0; i < n; ++i) v.push_back({ctx - 1 - (i * 37) % 64, 1});  // contexts near ctx, not all equal
    return v;
}

}  // namespace

void add_mla_cache_append_cases(CaseList& out) {
    const std::vector<SeqSpec> seqs = {{0, 5}, {37, 1}, {100, 29}, {3, 64}};
    for (int ps : {1, 16, 64}) out.push_back(std::make_unique<CacheAppendCase>(ps, 512, 64, seqs));
    out.push_back(std::make_unique<CacheAppendCase>(16, 64, 16, seqs));
}

void add_mla_absorb_cases(CaseList& out) {
    using M = jit::MlaAbsorbMode;
    out.push_back(std::make_unique<AbsorbCase>(M::q, false, 37, 4, 128, 64, 128, 512));
    out.push_back(std::make_unique<AbsorbCase>(M::q, false, 5, 3, 32, 16, 48, 64));
    out.push_back(std::make_unique<AbsorbCase>(M::out, false, 37, 4, 128, 64, 128, 512));
    out.push_back(std::make_unique<AbsorbCase>(M::out, true, 19, 3, 32, 16, 48, 64));
}

void add_mla_decode_cases(CaseList& out) {
    const std::vector<SeqSpec> mixed_ctx = {{0, 1}, {16, 1}, {300, 1}, {1023, 1}, {63, 1}};
    for (int ps : {1, 16, 64}) {
        out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", ps, 6, 64, 16, mixed_ctx, 0}));
        out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", ps, 6, 64, 16, mixed_ctx, 128}));
    }
    // K3's latent (512 + 64), a long cached context in pieces
    out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", 64, 16, 512, 64, decodes(3, 4096), 512}));
    out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", 16, 16, 512, 64, {{200, 1}, {4000, 1}}, 0}));
    for (int bh : {8, 32})
        out.push_back(std::make_unique<AttentionCase>(
            AttnSpec{"mla_decode", 16, 40, 512, 64, {{700, 1}, {90, 1}}, 256, true, true, 0, bh}));
    // the tensor-core kernel: K3's latent, a small one, partial head blocks, pieces
    for (int ps : {1, 64}) {
        out.push_back(std::make_unique<AttentionCase>(
            AttnSpec{"mla_decode", ps, 40, 512, 64, {{700, 1}, {90, 1}, {0, 1}}, 256, true, true, 0, 0, true}));
        out.push_back(std::make_unique<AttentionCase>(
            AttnSpec{"mla_decode", ps, 6, 64, 16, {{0, 1}, {16, 1}, {300, 1}, {1023, 1}}, 128, true, true, 0, 0, true}));
    }
    // bs 64 x 4k / 32k with all of K3's 96 heads (kiln bench op; sampled heads checked)
    out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", 64, 96, 512, 64, decodes(64, 4096), 0, false, true}));
    out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", 64, 96, 512, 64, decodes(64, 32768), 8192, false, true}));
    out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_decode", 64, 96, 512, 64, decodes(8, 32768), 2048, false, true}));
    for (int ctx : {4096, 32768})
        out.push_back(std::make_unique<AttentionCase>(
            AttnSpec{"mla_decode", 64, 96, 512, 64, decodes(64, ctx), 0, false, true, 0, 0, true}));
}

void add_mla_prefill_cases(CaseList& out) {
    const std::vector<SeqSpec> chunks = {{0, 50}, {100, 37}, {5, 1}, {64, 64}};
    for (int ps : {1, 16, 64}) {
        out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_prefill", ps, 6, 64, 16, chunks, 0}));
        out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_prefill", ps, 6, 64, 16, chunks, 64}));
    }
    out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_prefill", 16, 8, 512, 64, {{1000, 70}, {0, 33}}, 256}));
    for (auto [bt, bh] : {std::pair{1, 8}, std::pair{2, 16}, std::pair{4, 2}})
        out.push_back(std::make_unique<AttentionCase>(
            AttnSpec{"mla_prefill", 16, 10, 512, 64, {{300, 45}, {0, 9}, {77, 1}}, 0, true, true, bt, bh}));
    for (int bt : {1, 4})
        out.push_back(std::make_unique<AttentionCase>(AttnSpec{"mla_prefill", 16, 10, 512, 64,
                                                               {{300, 45}, {0, 9}, {77, 1}}, 128, true, true, bt, 0, true}));
    out.push_back(std::make_unique<AttentionCase>(
        AttnSpec{"mla_prefill", 1, 6, 64, 16, {{0, 50}, {100, 37}, {5, 1}}, 64, true, true, 2, 0, true}));
    // a K3-sized chunk after a long prefix (kiln bench op; sampled heads checked)
    out.push_back(std::make_unique<AttentionCase>(
        AttnSpec{"mla_prefill", 64, 96, 512, 64, {{8192, 512}}, 0, false, true}));
    out.push_back(std::make_unique<AttentionCase>(
        AttnSpec{"mla_prefill", 64, 96, 512, 64, {{8192, 512}}, 0, false, true, 4, 0, true}));
}

void add_mla_combine_cases(CaseList& out) {
    out.push_back(std::make_unique<CombineCase>(6, 64, std::vector<int>{0, 63, 64, 200, 1000, 5}, 64));
    out.push_back(std::make_unique<CombineCase>(4, 512, std::vector<int>{4095, 12, 2047, 9000}, 512));
}

}  // namespace kiln::ops
