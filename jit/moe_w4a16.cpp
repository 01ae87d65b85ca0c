#include "jit/moe_w4a16.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "jit/moe_w4a16_schedule.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;
using runtime::TensorView;

namespace {
// Automatic gate_up schedule: dynamic below this many routed slots (M x top-k), static from there on
// (H200 measurements, docs/perf-notes.md §8 and §10: for MXFP4 the static shares win at every size,
// also against the dynamic schedule with K split at batch 1 and 8).
constexpr int64_t k_gate_up_dynamic_max_slots_int4 = 4096;
constexpr int64_t k_gate_up_dynamic_max_slots_mxfp4 = 0;

// m-blocks the routing may emit for `slots` routed slots in blocks of `block_m` rows (at most one
// partly filled block per expert).
int mblock_capacity(int64_t slots, int experts, int block_m) {
    return static_cast<int>(slots / block_m + std::min<int64_t>(experts, slots) + 1);
}

bool prefill_call(int64_t slots, int experts, int64_t prefill_min) {
    return prefill_min >= 0 && slots >= prefill_min * experts;
}

// The prefill GEMMs were measured with the whole unified L1 / shared memory as shared memory (two CTAs
// of ~110 KB per SM); ask the driver for that carveout.
void prefer_shared_carveout(const LoadedKernel& k) {
    CUdevice dev = 0;
    CUresult r = runtime::driver().cuDeviceGet(&dev, 0);
    if (r == CUDA_SUCCESS)
        r = runtime::driver().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100,
                                                   k.kernel.handle(), dev);
    if (r != CUDA_SUCCESS)
        throw runtime::CudaError("cuKernelSetAttribute", r, "kernel " + k.kernel.name() + " shared memory carveout");
}
}  // namespace

DeviceMoeWeights DeviceMoeWeights::upload(const moe::PreparedMoeWeights& w) {
    DeviceMoeWeights d;
    d.buffer = runtime::DeviceBuffer(w.bytes.size());
    runtime::copy_h2d(d.buffer.ptr(), w.bytes.data(), w.bytes.size());
    d.meta = w;
    d.meta.bytes.clear();
    d.meta.bytes.shrink_to_fit();
    return d;
}

int MoeW4A16::prefill_block_m(int64_t slots) const {
    if (opt_.prefill_block_m != 0) return opt_.prefill_block_m;
    if (!opt_.prefill_wgmma || !MoeW4A16Family::has_wgmma(target_)) return 64;
    const double r = static_cast<double>(slots) / (static_cast<double>(experts_) * opt_.ep_size);
    if (r < 80.0) return 64;
    return 1.1 * r <= 128.0 ? 128 : 192;
}

int MoeW4A16::choose_tiles(int64_t tokens, int topk, int experts) {
    const double n = static_cast<double>(tokens) * topk;
    if (n <= 0 || experts <= 0) return 1;
    const double active = experts * (1.0 - std::pow(1.0 - 1.0 / experts, n));
    const double rows = n / std::max(1.0, active);
    if (rows <= 5.0) return 1;
    if (rows <= 11.0) return 2;
    return 4;
}

MoeW4A16::MoeW4A16(Dispatcher& disp, const moe::PreparedMoeWeights& gate_up, const moe::PreparedMoeWeights& down,
                   const MoeW4A16Options& opt)
    : opt_(opt) {
    if (!gate_up.gate_up) throw InvalidArgument("moe_w4a16: the first weights must be the interleaved gate/up matrices");
    if (down.gate_up) throw InvalidArgument("moe_w4a16: the second weights must be the down matrices");
    if (gate_up.format != down.format)
        throw InvalidArgument(fmt::format("moe_w4a16: gate_up is {} but down is {}", moe::to_string(gate_up.format),
                                          moe::to_string(down.format)));
    if (gate_up.experts != down.experts)
        throw InvalidArgument(fmt::format("moe_w4a16: {} gate_up experts but {} down experts", gate_up.experts, down.experts));
    if (gate_up.k != down.n || gate_up.n != down.k)
        throw InvalidArgument(fmt::format("moe_w4a16: gate_up [2x{}, {}] does not chain into down [{}, {}]", gate_up.n,
                                          gate_up.k, down.n, down.k));
    if (gate_up.n_pad / 2 != down.k_pad)
        throw InvalidArgument("moe_w4a16: gate_up and down were padded inconsistently (prepare both with this kiln)");
    if (opt.topk < 1 || opt.max_tokens < 1) throw InvalidArgument("moe_w4a16: topk and max_tokens must be positive");
    gu_ = gate_up;
    gu_.bytes.clear();
    dn_ = down;
    dn_.bytes.clear();
    hidden_ = down.n;
    inter_pad_ = down.k_pad;
    experts_ = down.experts;
    tiles_ = opt.tiles ? opt.tiles : choose_tiles(opt.max_tokens, opt.topk, experts_);
    if (tiles_ != 1 && tiles_ != 2 && tiles_ != 4)
        throw InvalidArgument(fmt::format("moe_w4a16: tiles={} must be 1, 2 or 4", tiles_));

    if (opt.gate_up_k_chunk < -1 || opt.down_k_chunk < -1)
        throw InvalidArgument(fmt::format("moe_w4a16: K chunks {} / {} (records; -1 = automatic, 0 = whole K)",
                                          opt.gate_up_k_chunk, opt.down_k_chunk));
    if (opt.order_window < 1) throw InvalidArgument("moe_w4a16: order_window must be at least 1");
    if (opt.prefill_min < -1)
        throw InvalidArgument(fmt::format("moe_w4a16: prefill_min={} (routed slots per expert; -1 = never)", opt.prefill_min));
    if (opt.fused_min < -1)
        throw InvalidArgument(fmt::format("moe_w4a16: fused_min={} (routed slots; -1 = never)", opt.fused_min));
    if (opt.fused_k_groups != 1 && opt.fused_k_groups != 2 && opt.fused_k_groups != 4)
        throw InvalidArgument(fmt::format("moe_w4a16: fused_k_groups={} (warp groups per item: 1, 2 or 4)", opt.fused_k_groups));
    if (opt.fused_k_groups_max_slots < -1)
        throw InvalidArgument(fmt::format("moe_w4a16: fused_k_groups_max_slots={} (routed slots; -1 = never)",
                                          opt.fused_k_groups_max_slots));
    const int64_t max_slots = static_cast<int64_t>(opt.max_tokens) * opt.topk;
    const bool prefill_possible = prefill_call(max_slots, experts_, opt.prefill_min);
    const bool decode_rows_possible = opt.rows_combine_min >= 0 && max_slots >= opt.rows_combine_min;
    // Which kernels a call can use (see launch_routing for the per-call choice).
    const bool int4 = gate_up.format == moe::W4Format::int4_g32_bf16;
    const auto gu_pick = opt.gate_up_schedule, dn_pick = opt.down_schedule;
    // The fused decode kernel (gate_up + down rows in one launch, both dynamic) from fused_min routed
    // slots, where the shapes allow it.
    const bool fused_possible = opt.fuse && opt.fused_min >= 0 && max_slots >= opt.fused_min &&
                                gu_pick != MoeW4A16SchedulePick::static_shares &&
                                dn_pick != MoeW4A16SchedulePick::static_shares &&
                                MoeW4A16Family::fusable(gate_up.n_pad, gate_up.k, opt.decode_block_k);
    const bool rows_possible = prefill_possible || decode_rows_possible || fused_possible;  // rows + combine
    gu_dyn_max_slots_ = int4 ? k_gate_up_dynamic_max_slots_int4 : k_gate_up_dynamic_max_slots_mxfp4;
    const bool gu_dyn_possible = gu_pick == MoeW4A16SchedulePick::dynamic ||
                                 (gu_pick == MoeW4A16SchedulePick::automatic && gu_dyn_max_slots_ > 0);
    const bool gu_static_possible = gu_pick == MoeW4A16SchedulePick::static_shares ||
                                    (gu_pick == MoeW4A16SchedulePick::automatic && max_slots >= gu_dyn_max_slots_);
    const bool dn_dyn = dn_pick != MoeW4A16SchedulePick::static_shares;
    const MoeW4A16Schedule dn_sched = dn_dyn ? MoeW4A16Schedule::dynamic : MoeW4A16Schedule::static_shares;

    const Target target = disp.device_target();
    target_ = target;
    k_routing_ = &disp.get(MoeW4A16Family::routing(experts_, tiles_, target));
    // the unfused decode kernels take decode_block_k where it divides their K
    const auto bk_for = [&](const moe::PreparedMoeWeights& w) {
        return opt.decode_block_k > 0 && w.k_pad % opt.decode_block_k == 0 ? opt.decode_block_k : 0;
    };
    const int gu_bk = bk_for(gate_up), dn_bk = bk_for(down);
    if (gu_static_possible)
        k_gate_up_ = &disp.get(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gate_up, opt.act, tiles_, target,
                                                    MoeW4A16Schedule::static_shares, false, gu_bk));
    if (gu_dyn_possible)
        k_gate_up_dyn_ = &disp.get(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gate_up, opt.act, tiles_, target,
                                                        MoeW4A16Schedule::dynamic, false, gu_bk));
    const LoadedKernel* dn_kernel =
        &disp.get(MoeW4A16Family::gemm(MoeW4A16Kernel::down, down, opt.act, tiles_, target, dn_sched, false, dn_bk));
    (dn_dyn ? k_down_dyn_ : k_down_) = dn_kernel;
    if (decode_rows_possible)
        k_down_rows_ =
            &disp.get(MoeW4A16Family::gemm(MoeW4A16Kernel::down, down, opt.act, tiles_, target, dn_sched, true, dn_bk));
    if (rows_possible) k_combine_ = &disp.get(MoeW4A16Family::combine(target));
    if (fused_possible) {
        // The fused kernel routes in shared memory: calls up to fused_max_slots_ routed slots fit (the
        // routing area grows with the m-block capacity); larger ones take the unfused kernels.
        const KernelDescriptor fd =
            MoeW4A16Family::fused(gate_up, opt.act, tiles_, target, opt.decode_stages, opt.decode_block_k);
        const auto fits = [&](int64_t s, int k_groups) {
            return MoeW4A16Family::fused_call_smem(fd, s, experts_, mblock_capacity(s, experts_, 8 * tiles_), opt.topk,
                                                   k_groups) > 0;
        };
        // fewer warp groups per item where K has too few stages or the partial sums leave no room in the
        // largest call that shares items
        const int64_t kg_slots = std::max(opt.fused_min, std::min(opt.fused_k_groups_max_slots, max_slots));
        int kg = opt.fused_k_groups;
        while (kg > 1 && !(MoeW4A16Family::fused_k_groups_ok(fd, kg) && fits(kg_slots, kg))) kg /= 2;
        fused_k_groups_ = opt.fused_k_groups_max_slots >= opt.fused_min ? kg : 1;
        // larger calls take one group per item
        int64_t lo = opt.fused_min, hi = max_slots;
        if (fits(lo, 1)) {
            while (lo < hi) {  // largest fitting slot count (the need grows with the slots)
                const int64_t mid = lo + (hi - lo + 1) / 2;
                if (fits(mid, 1)) lo = mid;
                else hi = mid - 1;
            }
            fused_max_slots_ = lo;
            k_fused_ = &disp.get(fd);
        }
    }
    const int64_t slots = static_cast<int64_t>(opt.max_tokens) * opt.topk;
    const bool wgmma = opt.prefill_wgmma && MoeW4A16Family::has_wgmma(target);
    if (opt.prefill_block_m != 0 && opt.prefill_block_m != 64 && opt.prefill_block_m != 128 && opt.prefill_block_m != 192)
        throw InvalidArgument(fmt::format("moe_w4a16: prefill_block_m={} (0 automatic, 64, 128 or 192)", opt.prefill_block_m));
    if (opt.prefill_block_m > 64 && !wgmma)
        throw InvalidArgument(fmt::format("moe_w4a16: prefill_block_m={} needs the warpgroup-MMA prefill (sm_90a)",
                                          opt.prefill_block_m));
    if (opt.ep_size < 1) throw InvalidArgument(fmt::format("moe_w4a16: ep_size={} must be at least 1", opt.ep_size));
    // Sorted rows, the intermediate and down's rows cover every m-block size a call may use.
    const int bm = 8 * tiles_;
    mblock_cap_ = mblock_capacity(slots, experts_, bm);
    size_t rows = static_cast<size_t>(mblock_cap_) * bm;
    int info_cap = mblock_cap_;
    if (prefill_possible) {
        // Every block_m a call from prefill_min slots up to the workspace may pick (the rule is monotone).
        const int bm_lo = prefill_block_m(std::max<int64_t>(1, opt.prefill_min * experts_));
        const int bm_hi = prefill_block_m(slots);
        has_prefill_ = true;
        for (int b = bm_lo; b <= bm_hi; b += 64) {
            PrefillKernels& k = pre_[b / 64 - 1];
            k.routing = &disp.get(MoeW4A16Family::routing(experts_, b / 8, target));
            k.gate_up = &disp.get(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gate_up, opt.act, target,
                                                               wgmma, opt.prefill_wide && b == 64, b));
            k.down = &disp.get(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, down, opt.act, target, wgmma,
                                                            opt.prefill_wide && b == 64, b));
            prefer_shared_carveout(*k.gate_up);
            prefer_shared_carveout(*k.down);
            const int cap = mblock_capacity(slots, experts_, b);
            rows = std::max(rows, static_cast<size_t>(cap) * b);
            info_cap = std::max(info_cap, cap);
        }
    }
    sm_count_ = runtime::device_props(0).sm_count;

    counts_ = runtime::DeviceBuffer(static_cast<size_t>(experts_) * 4);
    nmb_ = runtime::DeviceBuffer(4);
    info_ = runtime::DeviceBuffer(static_cast<size_t>(info_cap) * 8);
    sorted_token_ = runtime::DeviceBuffer(rows * 4);
    sorted_weight_ = runtime::DeviceBuffer(rows * 4);
    inter_ = runtime::DeviceBuffer(rows * inter_pad_ * 2);
    acc_ = runtime::DeviceBuffer(static_cast<size_t>(opt.max_tokens) * dn_.n_pad * 4);
    counters_ = runtime::DeviceBuffer(static_cast<size_t>(dn_.n_pad / 16) * 4);
    runtime::fill_u32(acc_.ptr(), 0, acc_.size() / 4);
    runtime::fill_u32(counters_.ptr(), 0, counters_.size() / 4);
    if (k_gate_up_dyn_ || dn_dyn) {
        work_ = runtime::DeviceBuffer(4 * 4);  // claim + finished counters of gate_up, then of down
        runtime::fill_u32(work_.ptr(), 0, 4);
        split_cap_ = moe::split_scratch_items(moe::k_gate_up_items_per_group * 4 * sm_count_, bm);
        split_acc_ = runtime::DeviceBuffer(static_cast<size_t>(split_cap_) * 128 * bm * 4);
        split_cnt_ = runtime::DeviceBuffer(static_cast<size_t>(split_cap_) * 4 * 4);
        runtime::fill_u32(split_acc_.ptr(), 0, split_acc_.size() / 4);
        runtime::fill_u32(split_cnt_.ptr(), 0, split_cnt_.size() / 4);
    }
    if (k_fused_) {  // gu_done per m-block, then dn_done
        gu_done_ = runtime::DeviceBuffer(static_cast<size_t>(mblock_cap_ + 1) * 4);
        runtime::fill_u32(gu_done_.ptr(), 0, mblock_cap_ + 1);
    }
    if (rows_possible) rows_ = runtime::DeviceBuffer(rows * static_cast<size_t>(dn_.n_pad) * 2);
    // the combine kernel finds each token's rows through the routing's slot positions (the fused kernel
    // sums its rows itself)
    if (prefill_possible || decode_rows_possible) slot_pos_ = runtime::DeviceBuffer(static_cast<size_t>(slots) * 4);
}

void MoeW4A16::check_views(const TensorView& x, const TensorView& ids, const TensorView& w, const TensorView& out) const {
    runtime::expect_tensor(ids, "moe_w4a16 topk_ids", DType::i32, 2, Location::device);
    const int64_t m = ids.shape[0];
    runtime::expect_shape(ids, "moe_w4a16 topk_ids", {m, opt_.topk});
    runtime::expect_tensor(w, "moe_w4a16 topk_weights", DType::f32, 2, Location::device);
    runtime::expect_shape(w, "moe_w4a16 topk_weights", {m, opt_.topk});
    runtime::expect_tensor(x, "moe_w4a16 x", DType::bf16, 2, Location::device);
    runtime::expect_shape(x, "moe_w4a16 x", {m, hidden_});
    runtime::expect_tensor(out, "moe_w4a16 out", DType::bf16, 2, Location::device);
    runtime::expect_shape(out, "moe_w4a16 out", {m, hidden_});
    for (const TensorView* t : {&ids, &w, &x, &out})
        if (!t->is_contiguous()) throw InvalidArgument(fmt::format("moe_w4a16: {} must be contiguous", t->describe()));
    if (m > opt_.max_tokens)
        throw InvalidArgument(fmt::format("moe_w4a16: {} tokens exceed the workspace ({} tokens)", m, opt_.max_tokens));
    if ((reinterpret_cast<uintptr_t>(x.data) | reinterpret_cast<uintptr_t>(out.data)) % 16 != 0)
        throw InvalidArgument("moe_w4a16: x and out must be 16-byte aligned");
}

void MoeW4A16::launch_routing(const TensorView& topk_ids, const TensorView& topk_weights, CUstream stream) {
    runtime::expect_tensor(topk_ids, "moe_w4a16 topk_ids", DType::i32, 2, Location::device);
    runtime::expect_tensor(topk_weights, "moe_w4a16 topk_weights", DType::f32, 2, Location::device);
    if (topk_ids.shape[0] > opt_.max_tokens || topk_ids.shape[1] != opt_.topk)
        throw InvalidArgument(fmt::format("moe_w4a16: topk_ids {} does not fit [<= {}, {}]", topk_ids.describe(),
                                          opt_.max_tokens, opt_.topk));
    tokens_ = static_cast<int>(topk_ids.shape[0]);
    const int64_t slots = static_cast<int64_t>(tokens_) * opt_.topk;
    use_prefill_ = has_prefill_ && prefill_call(slots, experts_, opt_.prefill_min);
    if (use_prefill_) {
        use_rows_ = true;
        gu_dyn_ = dn_dyn_ = use_fused_ = false;
        pre_bm_ = prefill_block_m(slots);
        // The call's own capacity (the grids are sized by it; slots <= the workspace's).
        call_cap_ = mblock_capacity(slots, experts_, pre_bm_);
        launch_routing_kernel(*pre().routing, topk_ids, topk_weights, call_cap_, stream);
        return;
    }
    use_fused_ = k_fused_ != nullptr && slots >= opt_.fused_min && slots <= fused_max_slots_;
    call_k_groups_ = use_fused_ && slots <= opt_.fused_k_groups_max_slots ? fused_k_groups_ : 1;
    if (use_fused_) {
        // the fused kernel routes and combines itself: nothing to launch before it
        use_rows_ = gu_dyn_ = dn_dyn_ = true;
        ids_ = reinterpret_cast<CUdeviceptr>(topk_ids.data);
        weights_ = reinterpret_cast<CUdeviceptr>(topk_weights.data);
        return;
    } else {
        use_rows_ = k_down_rows_ != nullptr && slots >= opt_.rows_combine_min;
        gu_dyn_ = k_gate_up_dyn_ != nullptr &&
                  (k_gate_up_ == nullptr || opt_.gate_up_schedule == MoeW4A16SchedulePick::dynamic ||
                   slots < gu_dyn_max_slots_);
        dn_dyn_ = opt_.down_schedule != MoeW4A16SchedulePick::static_shares;
    }
    launch_routing_kernel(*k_routing_, topk_ids, topk_weights, mblock_cap_, stream);
}

void MoeW4A16::launch_routing_kernel(const LoadedKernel& k, const TensorView& topk_ids, const TensorView& topk_weights,
                                     int cap, CUstream stream) {
    MoeW4A16RoutingParams p{};
    p.topk_ids = reinterpret_cast<CUdeviceptr>(topk_ids.data);
    p.topk_weights = reinterpret_cast<CUdeviceptr>(topk_weights.data);
    p.expert_count = counts_.ptr();
    p.num_mblocks = nmb_.ptr();
    p.mblock_info = info_.ptr();
    p.sorted_token = sorted_token_.ptr();
    p.sorted_weight = sorted_weight_.ptr();
    p.num_tokens = tokens_;
    p.topk = opt_.topk;
    p.num_experts = experts_;
    p.mblock_cap = cap;
    p.slot_pos = use_rows_ ? slot_pos_.ptr() : 0;  // the rows path (and so prefill) reads slot positions
    launch_moe_w4a16_routing(k, p, stream);
}

MoeW4A16DecodeParams MoeW4A16::gate_up_params(CUdeviceptr gate_up, const TensorView& x) const {
    MoeW4A16DecodeParams p{};
    p.weights = gate_up;
    p.expert_stride = gu_.expert_stride;
    p.x = reinterpret_cast<CUdeviceptr>(x.data);
    p.x_stride = hidden_;
    p.k_real = gu_.k;
    p.k_pad = gu_.k_pad;
    p.n_pad = gu_.n_pad;
    p.n_real = gu_.n_pad;
    p.num_mblocks = nmb_.ptr();
    p.mblock_info = info_.ptr();
    p.sorted_token = sorted_token_.ptr();
    p.sorted_weight = sorted_weight_.ptr();
    p.num_tokens = tokens_;
    p.inter = inter_.ptr();
    p.inter_stride = inter_pad_;
    p.work = work_.ptr();
    p.split_acc = split_acc_.ptr();
    p.split_cnt = split_cnt_.ptr();
    p.split_cap = split_cap_;
    const auto split = moe::decode_split(opt_.gate_up_k_chunk, 4 * sm_count_, moe::k_gate_up_items_per_group);
    p.k_chunk = split.k_chunk;
    p.split_max_items = split.split_max_items;
    p.order_window = opt_.order_window;
    return p;
}

void MoeW4A16::launch_gate_up(CUdeviceptr gate_up, CUdeviceptr down, const TensorView& x, const TensorView& out,
                              CUstream stream) {
    const MoeW4A16DecodeParams p = gate_up_params(gate_up, x);
    if (use_prefill_) {
        launch_moe_w4a16_prefill(*pre().gate_up, p, call_cap_, stream);
    } else if (use_fused_) {
        MoeW4A16FusedParams f{};
        f.gate_up = p;
        f.down = down_params(down, out);  // rows mode: out is the rows buffer, by slot
        f.gu_done = gu_done_.ptr();
        f.dn_done = gu_done_.ptr() + static_cast<size_t>(mblock_cap_) * 4;
        f.trace = fused_trace_;
        f.topk_ids = ids_;
        f.topk_weights = weights_;
        f.out = reinterpret_cast<CUdeviceptr>(out.data);
        f.out_stride = hidden_;
        f.num_mblocks = nmb_.ptr();
        f.topk = opt_.topk;
        f.num_experts = experts_;
        f.mblock_cap = mblock_capacity(static_cast<int64_t>(tokens_) * opt_.topk, experts_, 8 * tiles_);
        f.k_groups = call_k_groups_;
        launch_moe_w4a16_fused(*k_fused_, f, sm_count_, stream);
    } else {
        launch_moe_w4a16_gemm(gu_dyn_ ? *k_gate_up_dyn_ : *k_gate_up_, p, sm_count_, stream);
    }
}


MoeW4A16DecodeParams MoeW4A16::down_params(CUdeviceptr down, const TensorView& out) const {
    MoeW4A16DecodeParams p{};
    p.weights = down;
    p.expert_stride = dn_.expert_stride;
    p.x = inter_.ptr();
    p.x_stride = inter_pad_;
    p.k_real = dn_.k;
    p.k_pad = dn_.k_pad;
    p.n_pad = dn_.n_pad;
    p.n_real = hidden_;
    p.num_mblocks = nmb_.ptr();
    p.mblock_info = info_.ptr();
    p.sorted_token = sorted_token_.ptr();
    p.sorted_weight = sorted_weight_.ptr();
    p.num_tokens = tokens_;
    p.acc = acc_.ptr();
    p.acc_stride = dn_.n_pad;
    p.out = use_rows_ ? rows_.ptr() : reinterpret_cast<CUdeviceptr>(out.data);
    p.out_stride = use_rows_ ? dn_.n_pad : hidden_;
    p.counters = counters_.ptr();
    p.work = work_.ptr() ? work_.ptr() + 8 : 0;
    const auto split = moe::decode_split(opt_.down_k_chunk, 4 * sm_count_, moe::k_down_items_per_group);
    p.k_chunk = split.k_chunk;
    p.split_max_items = split.split_max_items;
    p.order_window = opt_.order_window;
    return p;
}

void MoeW4A16::launch_down(CUdeviceptr down, const TensorView& out, CUstream stream) {
    if (use_fused_) return;  // down and the combine ran in launch_gate_up
    if (use_prefill_) launch_moe_w4a16_prefill(*pre().down, down_params(down, out), call_cap_, stream);
    else
        launch_moe_w4a16_gemm(use_rows_ ? *k_down_rows_ : dn_dyn_ ? *k_down_dyn_ : *k_down_, down_params(down, out),
                              sm_count_, stream);
    if (use_rows_) {
        MoeW4A16CombineParams c{};
        c.rows = rows_.ptr();
        c.rows_stride = dn_.n_pad;
        c.slot_pos = slot_pos_.ptr();
        c.num_tokens = tokens_;
        c.topk = opt_.topk;
        c.n = hidden_;
        c.out = reinterpret_cast<CUdeviceptr>(out.data);
        c.out_stride = hidden_;
        // the warp-specialised down writes its rows in tiles of its m-blocks
        c.row_tile = use_prefill_ && MoeW4A16Family::prefill_ws(pre().down->desc) ? pre_bm_ : 0;
        launch_moe_w4a16_combine(*k_combine_, c, sm_count_, stream);
    }
}

void MoeW4A16::forward(CUdeviceptr gate_up, CUdeviceptr down, const TensorView& x, const TensorView& topk_ids,
                       const TensorView& topk_weights, const TensorView& out, CUstream stream) {
    check_views(x, topk_ids, topk_weights, out);
    launch_routing(topk_ids, topk_weights, stream);
    launch_gate_up(gate_up, down, x, out, stream);
    launch_down(down, out, stream);
}

}  // namespace kiln::jit
