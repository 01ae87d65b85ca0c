#include "model/layers/moe_w4a16.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/moe_w4a16_combine.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_decode_fused.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "runtime/error.hpp"

namespace kiln::model::layers {

using autotune::SchedulePick;
using jit::LoadedKernel;
using jit::MoeW4A16CombineFamily;
using jit::MoeW4A16DecodeFamily;
using jit::MoeW4A16DecodeFusedFamily;
using jit::MoeW4A16PrefillFamily;
using jit::MoeW4A16RouteFamily;
using jit::moe::Matrix;
using runtime::DType;
using runtime::TensorView;

const char* to_string(MoeW4A16Path p) {
    switch (p) {
        case MoeW4A16Path::decode: return "decode";
        case MoeW4A16Path::decode_rows: return "decode_rows";
        case MoeW4A16Path::fused: return "fused";
        case MoeW4A16Path::prefill: return "prefill";
    }
    return "decode";
}

int moe_w4a16_mblock_capacity(int64_t slots, int experts, int block_m) {
    return static_cast<int>(slots / block_m + std::min<int64_t>(experts, slots) + 1);
}

jit::moe::MatrixShape matrix_shape(const weights::PreparedMoeWeights& w) {
    jit::moe::MatrixShape m;
    m.format = w.format;
    m.n_pad = w.n_pad;
    m.k = w.k;
    m.wide_scales = w.wide_scales;
    return m;
}

namespace {

template <typename T>
T* at(const runtime::Buffer& b, size_t offset_bytes = 0) {
    return b ? reinterpret_cast<T*>(b.addr() + offset_bytes) : nullptr;
}

void zero(runtime::Stream& s, const runtime::Buffer& b) {
    if (b) s.fill_u32(b.addr(), 0, b.size() / 4);
}

}  // namespace

MoeW4A16KernelSet moe_w4a16_kernel_set(const weights::PreparedMoeWeights& gate_up, const weights::PreparedMoeWeights& down,
                                       const MoeW4A16Shape& shape, const autotune::MoeW4A16Tuning& tuning,
                                       jit::Target target) {
    if (!gate_up.gate_up) throw InvalidArgument("moe_w4a16: the first weights must be the interleaved gate/up matrices");
    if (down.gate_up) throw InvalidArgument("moe_w4a16: the second weights must be the down matrices");
    weights::require_layout(gate_up, weights::W4Layout::decode_mma16, gate_up.format, "moe_w4a16 gate_up");
    weights::require_layout(down, weights::W4Layout::decode_mma16, gate_up.format, "moe_w4a16 down");
    if (gate_up.experts != down.experts)
        throw InvalidArgument(fmt::format("moe_w4a16: {} gate_up experts but {} down experts", gate_up.experts, down.experts));
    if (gate_up.k != down.n || gate_up.n != down.k)
        throw InvalidArgument(fmt::format("moe_w4a16: gate_up [2x{}, {}] does not chain into down [{}, {}]", gate_up.n,
                                          gate_up.k, down.n, down.k));
    if (gate_up.n_pad / 2 != down.k_pad)
        throw InvalidArgument("moe_w4a16: gate_up and down were padded inconsistently (prepare both with this kiln)");
    if (shape.topk < 1 || shape.max_tokens < 1) throw InvalidArgument("moe_w4a16: topk and max_tokens must be positive");
    if (shape.ep_size < 1) throw InvalidArgument(fmt::format("moe_w4a16: ep_size={} must be at least 1", shape.ep_size));
    autotune::validate(tuning);
    MoeW4A16KernelSet ks;
    const int experts = down.experts;
    const bool host = target.is_host();
    ks.wgmma = tuning.prefill_wgmma && jit::moe::has_wgmma(target);
    if (tuning.prefill_block_m > 64 && !ks.wgmma)
        throw InvalidArgument(fmt::format("moe_w4a16: prefill_block_m={} needs the warpgroup-MMA prefill (sm_90a)",
                                          tuning.prefill_block_m));
    ks.tiles = tuning.tiles ? tuning.tiles : autotune::choose_tiles(shape.max_tokens, shape.topk, experts);
    const int bm = 8 * ks.tiles;

    const auto gu_shape = matrix_shape(gate_up), dn_shape = matrix_shape(down);
    const int64_t max_slots = static_cast<int64_t>(shape.max_tokens) * shape.topk;
    ks.prefill_possible = autotune::prefill_call(tuning, max_slots, experts);
    const bool decode_rows_possible = tuning.rows_combine_min >= 0 && max_slots >= tuning.rows_combine_min;
    const auto gu_pick = host ? SchedulePick::static_shares : tuning.gate_up_schedule;
    const auto dn_pick = host ? SchedulePick::static_shares : tuning.down_schedule;
    const bool fused_possible = !host && tuning.fuse && tuning.fused_min >= 0 && max_slots >= tuning.fused_min &&
                                gu_pick != SchedulePick::static_shares && dn_pick != SchedulePick::static_shares &&
                                MoeW4A16DecodeFusedFamily::fusable(gate_up.n_pad, gate_up.k, tuning.decode_block_k);
    ks.rows_possible = ks.prefill_possible || decode_rows_possible || fused_possible;
    const bool gu_dyn_possible = gu_pick == SchedulePick::dynamic ||
                                 (gu_pick == SchedulePick::automatic && tuning.gate_up_dynamic_max_slots > 0);
    const bool gu_static_possible = gu_pick == SchedulePick::static_shares ||
                                    (gu_pick == SchedulePick::automatic && max_slots >= tuning.gate_up_dynamic_max_slots);
    ks.down_dynamic = dn_pick != SchedulePick::static_shares;

    ks.route = MoeW4A16RouteFamily::descriptor(experts, bm, target);
    // the unfused decode kernels take decode_block_k where it divides their K
    const auto bk_for = [&](const weights::PreparedMoeWeights& w) {
        return tuning.decode_block_k > 0 && w.k_pad % tuning.decode_block_k == 0 ? tuning.decode_block_k : 0;
    };
    const int gu_bk = bk_for(gate_up), dn_bk = bk_for(down);
    if (gu_static_possible)
        ks.gate_up = MoeW4A16DecodeFamily::descriptor(Matrix::gate_up, gu_shape, shape.act, bm, target, false, false, gu_bk);
    if (gu_dyn_possible)
        ks.gate_up_dyn = MoeW4A16DecodeFamily::descriptor(Matrix::gate_up, gu_shape, shape.act, bm, target, true, false, gu_bk);
    ks.down = MoeW4A16DecodeFamily::descriptor(Matrix::down, dn_shape, shape.act, bm, target, ks.down_dynamic, false, dn_bk);
    if (decode_rows_possible)
        ks.down_rows = MoeW4A16DecodeFamily::descriptor(Matrix::down, dn_shape, shape.act, bm, target, ks.down_dynamic, true, dn_bk);
    if (ks.rows_possible && (ks.prefill_possible || decode_rows_possible))
        ks.combine = MoeW4A16CombineFamily::descriptor(target);
    if (fused_possible) {
        // The fused kernel routes in shared memory: calls up to fused_max_slots routed slots fit (the routing
        // area grows with the m-block capacity); larger ones take the unfused kernels.
        const jit::KernelDescriptor fd = MoeW4A16DecodeFusedFamily::descriptor(gu_shape, shape.act, bm, target,
                                                                               tuning.decode_stages, tuning.decode_block_k);
        const auto fits = [&](int64_t s, int k_groups) {
            return MoeW4A16DecodeFusedFamily::call_smem(fd, s, experts, moe_w4a16_mblock_capacity(s, experts, bm),
                                                        shape.topk, k_groups) > 0;
        };
        // fewer warp groups per item where K has too few stages or the partial sums leave no room in the
        // largest call that shares items
        const int64_t kg_slots = std::max(tuning.fused_min, std::min(tuning.fused_k_groups_max_slots, max_slots));
        int kg = tuning.fused_k_groups;
        while (kg > 1 && !(MoeW4A16DecodeFusedFamily::k_groups_ok(fd, kg) && fits(kg_slots, kg))) kg /= 2;
        ks.fused_k_groups = tuning.fused_k_groups_max_slots >= tuning.fused_min ? kg : 1;
        int64_t lo = tuning.fused_min, hi = max_slots;
        if (fits(lo, 1)) {
            while (lo < hi) {  // the largest fitting slot count (the need grows with the slots)
                const int64_t mid = lo + (hi - lo + 1) / 2;
                if (fits(mid, 1)) lo = mid;
                else hi = mid - 1;
            }
            ks.fused_max_slots = lo;
            ks.fused = fd;
        }
    }
    if (ks.prefill_possible) {
        // Every block_m a call from prefill_min slots up to the workspace may pick (the rule is monotone).
        const int bm_lo = autotune::prefill_block_m(tuning, std::max<int64_t>(1, tuning.prefill_min * experts),
                                                    experts, shape.ep_size, ks.wgmma);
        const int bm_hi = autotune::prefill_block_m(tuning, max_slots, experts, shape.ep_size, ks.wgmma);
        const jit::MoeMma mma = ks.wgmma ? jit::MoeMma::wgmma : jit::MoeMma::sync;
        for (int b = bm_lo; b <= bm_hi; b += 64) {
            MoeW4A16KernelSet::Prefill& k = ks.prefill[b / 64 - 1];
            k.route = MoeW4A16RouteFamily::descriptor(experts, b, target);
            k.gate_up = MoeW4A16PrefillFamily::descriptor(Matrix::gate_up, gu_shape, shape.act, target, mma,
                                                          tuning.prefill_wide && b == 64, b);
            k.down = MoeW4A16PrefillFamily::descriptor(Matrix::down, dn_shape, shape.act, target, mma,
                                                       tuning.prefill_wide && b == 64, b);
        }
    }
    return ks;
}

std::vector<jit::KernelDescriptor> MoeW4A16KernelSet::all() const {
    std::vector<jit::KernelDescriptor> out = {route, down};
    for (const auto* d : {&gate_up, &gate_up_dyn, &down_rows, &combine, &fused})
        if (*d) out.push_back(**d);
    for (const Prefill& p : prefill)
        if (p.route) out.insert(out.end(), {*p.route, *p.gate_up, *p.down});
    return out;
}

MoeW4A16::MoeW4A16(jit::Dispatcher& disp, runtime::Backend& backend, const weights::PreparedMoeWeights& gate_up,
                   const weights::PreparedMoeWeights& down, const MoeW4A16Shape& shape,
                   const autotune::MoeW4A16Tuning& tuning)
    : backend_(backend), shape_(shape), tuning_(tuning) {
    const bool host = backend.kind() == runtime::BackendKind::host;
    target_ = host ? jit::Target::host_target() : disp.device_target();
    const MoeW4A16KernelSet ks = moe_w4a16_kernel_set(gate_up, down, shape, tuning, target_);
    gu_ = gate_up;
    gu_.bytes.clear();
    dn_ = down;
    dn_.bytes.clear();
    hidden_ = down.n;
    inter_pad_ = down.k_pad;
    experts_ = down.experts;
    compute_units_ = backend.compute_units();
    wgmma_ = ks.wgmma;
    tiles_ = ks.tiles;
    const int bm = 8 * tiles_;
    const int64_t max_slots = static_cast<int64_t>(shape.max_tokens) * shape.topk;
    const bool prefill_possible = ks.prefill_possible;
    const bool decode_rows_possible = ks.down_rows.has_value();
    const bool rows_possible = ks.rows_possible;
    const bool dn_dyn = ks.down_dynamic;

    k_route_ = &disp.get(ks.route);
    if (ks.gate_up) k_gate_up_ = &disp.get(*ks.gate_up);
    if (ks.gate_up_dyn) k_gate_up_dyn_ = &disp.get(*ks.gate_up_dyn);
    k_down_ = &disp.get(ks.down);
    if (ks.down_rows) k_down_rows_ = &disp.get(*ks.down_rows);
    if (ks.combine) k_combine_ = &disp.get(*ks.combine);
    fused_k_groups_ = ks.fused_k_groups;
    if (ks.fused) {
        fused_max_slots_ = ks.fused_max_slots;
        k_fused_ = &disp.get(*ks.fused);
    }
    // Sorted rows, the intermediate and down's rows cover every m-block size a call may use.
    mblock_cap_ = moe_w4a16_mblock_capacity(max_slots, experts_, bm);
    size_t rows = static_cast<size_t>(mblock_cap_) * bm;
    int info_cap = mblock_cap_;
    if (prefill_possible) {
        has_prefill_ = true;
        for (int i = 0; i < 3; ++i) {
            const MoeW4A16KernelSet::Prefill& d = ks.prefill[i];
            if (!d.route) continue;
            const int b = 64 * (i + 1);
            PrefillKernels& k = pre_[i];
            k.route = &disp.get(*d.route);
            k.gate_up = &disp.get(*d.gate_up);
            k.down = &disp.get(*d.down);
            const int cap = moe_w4a16_mblock_capacity(max_slots, experts_, b);
            rows = std::max(rows, static_cast<size_t>(cap) * b);
            info_cap = std::max(info_cap, cap);
        }
    }

    counts_ = backend.alloc(static_cast<size_t>(experts_) * 4);
    nmb_ = backend.alloc(4);
    info_ = backend.alloc(static_cast<size_t>(info_cap) * 8);
    sorted_token_ = backend.alloc(rows * 4);
    sorted_weight_ = backend.alloc(rows * 4);
    inter_ = backend.alloc(rows * inter_pad_ * 2);
    acc_ = backend.alloc(static_cast<size_t>(shape.max_tokens) * dn_.n_pad * 4);
    counters_ = backend.alloc(static_cast<size_t>(dn_.n_pad / 16) * 4);
    if (k_gate_up_dyn_ || dn_dyn) {
        work_ = backend.alloc(4 * 4);  // claim + finished counters of gate_up, then of down
        split_cap_ = autotune::split_scratch_items(autotune::k_gate_up_items_per_group * 4 * compute_units_, bm);
        split_acc_ = backend.alloc(static_cast<size_t>(split_cap_) * 128 * bm * 4);
        split_cnt_ = backend.alloc(static_cast<size_t>(split_cap_) * 4 * 4);
    }
    if (k_fused_) gu_done_ = backend.alloc(static_cast<size_t>(mblock_cap_ + 1) * 4);  // gu_done per m-block, dn_done
    if (rows_possible) rows_ = backend.alloc(rows * static_cast<size_t>(dn_.n_pad) * 2);
    // the combine finds each token's rows through the routing's slot positions (the fused kernel sums its own)
    if (prefill_possible || decode_rows_possible) slot_pos_ = backend.alloc(static_cast<size_t>(max_slots) * 4);
    auto s = backend.create_stream();
    for (const runtime::Buffer* b : {&acc_, &counters_, &work_, &split_acc_, &split_cnt_, &gu_done_}) zero(*s, *b);
    s->synchronize();
}

MoeW4A16::~MoeW4A16() = default;

MoeW4A16Plan MoeW4A16::plan(int tokens) const {
    if (tokens < 0 || tokens > shape_.max_tokens)
        throw InvalidArgument(fmt::format("moe_w4a16: {} tokens, the workspace holds {}", tokens, shape_.max_tokens));
    MoeW4A16Plan p;
    p.tokens = tokens;
    const int64_t slots = static_cast<int64_t>(tokens) * shape_.topk;
    if (has_prefill_ && autotune::prefill_call(tuning_, slots, experts_)) {
        p.path = MoeW4A16Path::prefill;
        p.block_m = autotune::prefill_block_m(tuning_, slots, experts_, shape_.ep_size, wgmma_);
        p.mblock_cap = moe_w4a16_mblock_capacity(slots, experts_, p.block_m);
        const PrefillKernels& k = pre_[p.block_m / 64 - 1];
        p.route = k.route;
        p.gate_up = k.gate_up;
        p.down = k.down;
        p.combine = k_combine_;
        return p;
    }
    p.block_m = 8 * tiles_;
    p.mblock_cap = mblock_cap_;
    if (k_fused_ && slots >= tuning_.fused_min && slots <= fused_max_slots_) {
        p.path = MoeW4A16Path::fused;
        p.gate_up_dynamic = p.down_dynamic = true;
        p.k_groups = slots <= tuning_.fused_k_groups_max_slots ? fused_k_groups_ : 1;
        p.gate_up = k_fused_;
        p.mblock_cap = moe_w4a16_mblock_capacity(slots, experts_, p.block_m);
        return p;
    }
    const bool rows = k_down_rows_ != nullptr && slots >= tuning_.rows_combine_min;
    p.path = rows ? MoeW4A16Path::decode_rows : MoeW4A16Path::decode;
    p.gate_up_dynamic = k_gate_up_dyn_ != nullptr &&
                        (k_gate_up_ == nullptr || tuning_.gate_up_schedule == SchedulePick::dynamic ||
                         slots < tuning_.gate_up_dynamic_max_slots);
    p.down_dynamic = work_ && tuning_.down_schedule != SchedulePick::static_shares;
    p.route = k_route_;
    p.gate_up = p.gate_up_dynamic ? k_gate_up_dyn_ : k_gate_up_;
    p.down = rows ? k_down_rows_ : k_down_;
    p.combine = rows ? k_combine_ : nullptr;
    return p;
}

std::vector<const LoadedKernel*> MoeW4A16::kernels() const {
    std::vector<const LoadedKernel*> out;
    for (const LoadedKernel* k : {k_route_, k_gate_up_, k_gate_up_dyn_, k_down_, k_down_rows_, k_combine_, k_fused_})
        if (k) out.push_back(k);
    for (const PrefillKernels& p : pre_)
        for (const LoadedKernel* k : {p.route, p.gate_up, p.down})
            if (k) out.push_back(k);
    return out;
}

void MoeW4A16::check(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, const runtime::Stream& s) const {
    if (&s.backend() != &backend_) throw InvalidArgument("moe_w4a16: a stream of another backend");
    const runtime::Location where = backend_.location();
    runtime::expect_tensor(t.topk_ids, "moe_w4a16 topk_ids", DType::i32, 2, where);
    runtime::expect_shape(t.topk_ids, "moe_w4a16 topk_ids", {p.tokens, shape_.topk});
    runtime::expect_tensor(t.topk_weights, "moe_w4a16 topk_weights", DType::f32, 2, where);
    runtime::expect_shape(t.topk_weights, "moe_w4a16 topk_weights", {p.tokens, shape_.topk});
    runtime::expect_tensor(t.x, "moe_w4a16 x", DType::bf16, 2, where);
    runtime::expect_shape(t.x, "moe_w4a16 x", {p.tokens, hidden_});
    runtime::expect_tensor(t.out, "moe_w4a16 out", DType::bf16, 2, where);
    runtime::expect_shape(t.out, "moe_w4a16 out", {p.tokens, hidden_});
    for (const TensorView* v : {&t.topk_ids, &t.topk_weights, &t.x, &t.out})
        if (!v->is_contiguous()) throw InvalidArgument(fmt::format("moe_w4a16: {} must be contiguous", v->describe()));
    if ((reinterpret_cast<uintptr_t>(t.x.data) | reinterpret_cast<uintptr_t>(t.out.data)) % 16 != 0)
        throw InvalidArgument("moe_w4a16: x and out must be 16-byte aligned");
    if (t.gate_up == 0 || t.down == 0) throw InvalidArgument("moe_w4a16: null weights");
}

void MoeW4A16::run(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s) {
    check(p, t, s);
    if (p.tokens == 0) return;
    run_route(p, t, s);
    run_gate_up(p, t, s);
    run_down(p, t, s);
}

void MoeW4A16::run_route(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s) {
    if (p.path == MoeW4A16Path::fused) return;  // the fused kernel routes itself
    kiln_params::moe::RoutingParams r{};
    r.topk_ids = t.topk_ids.ptr<const int32_t>();
    r.topk_weights = t.topk_weights.ptr<const float>();
    r.expert_count = at<int32_t>(counts_);
    r.num_mblocks = at<int32_t>(nmb_);
    r.mblock_info = at<kiln_params::i32x2>(info_);
    r.sorted_token = at<int32_t>(sorted_token_);
    r.sorted_weight = at<float>(sorted_weight_);
    r.num_tokens = p.tokens;
    r.topk = shape_.topk;
    r.num_experts = experts_;
    r.mblock_cap = p.mblock_cap;
    r.slot_pos = p.combine ? at<int32_t>(slot_pos_) : nullptr;  // the combine reads slot positions
    jit::launch_moe_w4a16_route(*p.route, s, r);
}

kiln_params::moe::DecodeParams MoeW4A16::gate_up_params(const MoeW4A16Plan& p, const MoeW4A16Tensors& t) const {
    kiln_params::moe::DecodeParams g{};
    g.weights = reinterpret_cast<const uint8_t*>(t.gate_up);
    g.expert_stride = gu_.expert_stride;
    g.x = t.x.ptr<const uint16_t>();
    g.x_stride = hidden_;
    g.k_real = gu_.k;
    g.k_pad = gu_.k_pad;
    g.n_pad = gu_.n_pad;
    g.n_real = gu_.n_pad;
    g.num_mblocks = at<int32_t>(nmb_);
    g.mblock_info = at<kiln_params::i32x2>(info_);
    g.sorted_token = at<int32_t>(sorted_token_);
    g.sorted_weight = at<float>(sorted_weight_);
    g.num_tokens = p.tokens;
    g.inter = at<uint16_t>(inter_);
    g.inter_stride = inter_pad_;
    g.work = at<int32_t>(work_);
    g.split_acc = at<float>(split_acc_);
    g.split_cnt = at<int32_t>(split_cnt_);
    g.split_cap = split_cap_;
    const auto split =
        autotune::decode_split(tuning_.gate_up_k_chunk, 4 * compute_units_, autotune::k_gate_up_items_per_group);
    g.k_chunk = split.k_chunk;
    g.split_max_items = split.split_max_items;
    g.order_window = tuning_.order_window;
    return g;
}

kiln_params::moe::DecodeParams MoeW4A16::down_params(const MoeW4A16Plan& p, const MoeW4A16Tensors& t) const {
    kiln_params::moe::DecodeParams d{};
    d.weights = reinterpret_cast<const uint8_t*>(t.down);
    d.expert_stride = dn_.expert_stride;
    d.x = at<const uint16_t>(inter_);
    d.x_stride = inter_pad_;
    d.k_real = dn_.k;
    d.k_pad = dn_.k_pad;
    d.n_pad = dn_.n_pad;
    d.n_real = hidden_;
    d.num_mblocks = at<int32_t>(nmb_);
    d.mblock_info = at<kiln_params::i32x2>(info_);
    d.sorted_token = at<int32_t>(sorted_token_);
    d.sorted_weight = at<float>(sorted_weight_);
    d.num_tokens = p.tokens;
    d.acc = at<float>(acc_);
    d.acc_stride = dn_.n_pad;
    d.out = p.rows() ? at<uint16_t>(rows_) : t.out.ptr<uint16_t>();
    d.out_stride = p.rows() ? dn_.n_pad : hidden_;
    d.counters = at<int32_t>(counters_);
    d.work = work_ ? at<int32_t>(work_, 8) : nullptr;
    const auto split = autotune::decode_split(tuning_.down_k_chunk, 4 * compute_units_, autotune::k_down_items_per_group);
    d.k_chunk = split.k_chunk;
    d.split_max_items = split.split_max_items;
    d.order_window = tuning_.order_window;
    return d;
}

void MoeW4A16::run_gate_up(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s) {
    const kiln_params::moe::DecodeParams g = gate_up_params(p, t);
    switch (p.path) {
        case MoeW4A16Path::prefill: jit::launch_moe_w4a16_prefill(*p.gate_up, s, g, p.mblock_cap); return;
        case MoeW4A16Path::fused: {
            kiln_params::moe::FusedDecodeParams f{};
            f.gate_up = g;
            f.down = down_params(p, t);  // rows mode: out is the rows buffer, by slot
            f.gu_done = at<int32_t>(gu_done_);
            f.dn_done = at<int32_t>(gu_done_, static_cast<size_t>(mblock_cap_) * 4);
            f.trace = reinterpret_cast<uint64_t*>(fused_trace_);
            f.topk_ids = t.topk_ids.ptr<const int32_t>();
            f.topk_weights = t.topk_weights.ptr<const float>();
            f.out = t.out.ptr<uint16_t>();
            f.out_stride = hidden_;
            f.num_mblocks = at<int32_t>(nmb_);
            f.topk = shape_.topk;
            f.num_experts = experts_;
            f.mblock_cap = p.mblock_cap;
            f.k_groups = p.k_groups;
            jit::launch_moe_w4a16_decode_fused(*p.gate_up, s, f);
            return;
        }
        default: jit::launch_moe_w4a16_decode(*p.gate_up, s, g); return;
    }
}

void MoeW4A16::run_down(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s) {
    if (p.path == MoeW4A16Path::fused) return;  // down and the combine ran in run_gate_up
    const kiln_params::moe::DecodeParams d = down_params(p, t);
    if (p.path == MoeW4A16Path::prefill) jit::launch_moe_w4a16_prefill(*p.down, s, d, p.mblock_cap);
    else jit::launch_moe_w4a16_decode(*p.down, s, d);
    if (!p.combine) return;
    kiln_params::moe::CombineParams c{};
    c.rows = at<const uint16_t>(rows_);
    c.rows_stride = dn_.n_pad;
    c.slot_pos = at<const int32_t>(slot_pos_);
    c.num_tokens = p.tokens;
    c.topk = shape_.topk;
    c.n = hidden_;
    c.out = t.out.ptr<uint16_t>();
    c.out_stride = hidden_;
    // the warp-specialised down writes its rows in tiles of its m-blocks
    c.row_tile = p.path == MoeW4A16Path::prefill && MoeW4A16PrefillFamily::warp_specialised(p.down->desc) ? p.block_m : 0;
    jit::launch_moe_w4a16_combine(*p.combine, s, c);
}

}  // namespace kiln::model::layers
