#include "jit/moe_w4a16_host.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/host_launch.hpp"
#include "jit/moe_w4a16.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {

template <typename T>
CUdeviceptr addr(T* p) {
    return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

int mblock_capacity(int64_t slots, int block_m, int experts) {
    return static_cast<int>(slots / block_m + std::min<int64_t>(experts, slots) + 1);
}

}  // namespace

MoeW4A16HostLayer::MoeW4A16HostLayer(HostKernelLoader& loader, const moe::PreparedMoeWeights& gate_up,
                                     const moe::PreparedMoeWeights& down, const MoeW4A16HostOptions& opt)
    : loader_(loader), gu_(gate_up), dn_(down), opt_(opt) {
    if (!gu_.gate_up || dn_.gate_up)
        throw InvalidArgument("moe_w4a16 host layer: needs interleaved gate/up weights and plain down weights");
    if (gu_.experts != dn_.experts || gu_.format != dn_.format || gu_.k != dn_.n || gu_.n != dn_.k)
        throw InvalidArgument(fmt::format("moe_w4a16 host layer: gate_up [{} experts, {} x {}] and down [{} experts, "
                                          "{} x {}] do not fit together",
                                          gu_.experts, gu_.n, gu_.k, dn_.experts, dn_.n, dn_.k));
    if (opt_.topk < 1 || opt_.max_tokens < 1)
        throw InvalidArgument(fmt::format("moe_w4a16 host layer: topk {} and max_tokens {} must be positive", opt_.topk,
                                          opt_.max_tokens));
    tiles_ = opt_.tiles ? opt_.tiles : MoeW4A16::choose_tiles(opt_.max_tokens, opt_.topk, dn_.experts);
    const int64_t slots = static_cast<int64_t>(opt_.max_tokens) * opt_.topk;
    const int cap8 = mblock_capacity(slots, 8 * tiles_, dn_.experts), cap64 = mblock_capacity(slots, 64, dn_.experts);
    const size_t rows = std::max(static_cast<size_t>(cap8) * 8 * tiles_, static_cast<size_t>(cap64) * 64);
    counts_.assign(dn_.experts, 0);
    nmb_.assign(1, 0);
    info_.assign(2 * static_cast<size_t>(std::max(cap8, cap64)), 0);
    sorted_token_.assign(rows, 0);
    sorted_weight_.assign(rows, 0.0f);
    inter_.assign(rows * dn_.k_pad, 0);
    acc_.assign(static_cast<size_t>(opt_.max_tokens) * dn_.n_pad, 0.0f);
    counters_.assign(dn_.n_pad / 16, 0);
    slot_pos_.assign(slots, 0);
    rows_.assign(rows * dn_.n, 0);
}

MoeW4A16HostConfig MoeW4A16HostLayer::config_for(int tokens) const {
    if (opt_.force) return *opt_.force;
    const int64_t slots = static_cast<int64_t>(tokens) * opt_.topk;
    if (opt_.prefill_min >= 0 && slots >= opt_.prefill_min * dn_.experts) return MoeW4A16HostConfig::prefill;
    if (opt_.rows_combine_min >= 0 && slots >= opt_.rows_combine_min) return MoeW4A16HostConfig::decode_rows;
    return MoeW4A16HostConfig::decode_combined;
}

const MoeW4A16HostLayer::Kernels& MoeW4A16HostLayer::kernels(MoeW4A16HostConfig c) {
    Kernels& k = k_[static_cast<int>(c)];
    if (k.routing) return k;
    const Target host = Target::host_target();
    const int64_t slots = static_cast<int64_t>(opt_.max_tokens) * opt_.topk;
    if (c == MoeW4A16HostConfig::prefill) {
        k.block_m = 64;
        k.routing = &loader_.get(MoeW4A16Family::routing(dn_.experts, 8, host));
        k.gate_up = &loader_.get(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu_, opt_.act, host));
        k.down = &loader_.get(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn_, opt_.act, host));
    } else {
        k.block_m = 8 * tiles_;
        k.routing = &loader_.get(MoeW4A16Family::routing(dn_.experts, tiles_, host));
        k.gate_up = &loader_.get(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu_, opt_.act, tiles_, host));
        k.down = &loader_.get(MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn_, opt_.act, tiles_, host,
                                                   MoeW4A16Schedule::static_shares,
                                                   c == MoeW4A16HostConfig::decode_rows));
    }
    k.cap = mblock_capacity(slots, k.block_m, dn_.experts);
    if (c != MoeW4A16HostConfig::decode_combined && !combine_) combine_ = &loader_.get(MoeW4A16Family::combine(host));
    return k;
}

void MoeW4A16HostLayer::forward(const uint16_t* x, const int32_t* ids, const float* weights, int tokens,
                                uint16_t* out, runtime::HostStream& stream) {
    if (tokens < 0 || tokens > opt_.max_tokens)
        throw InvalidArgument(fmt::format("moe_w4a16 host layer: {} tokens, the workspace holds {}", tokens,
                                          opt_.max_tokens));
    if (tokens > 0 && (!x || !ids || !weights || !out))
        throw InvalidArgument("moe_w4a16 host layer: null activations, routing or output");
    const MoeW4A16HostConfig c = config_for(tokens);
    const Kernels& k = kernels(c);
    const bool rows = c != MoeW4A16HostConfig::decode_combined;
    last_ = c;

    MoeW4A16RoutingParams rp{};
    rp.topk_ids = addr(ids);
    rp.topk_weights = addr(weights);
    rp.expert_count = addr(counts_.data());
    rp.num_mblocks = addr(nmb_.data());
    rp.mblock_info = addr(info_.data());
    rp.sorted_token = addr(sorted_token_.data());
    rp.sorted_weight = addr(sorted_weight_.data());
    rp.num_tokens = tokens;
    rp.topk = opt_.topk;
    rp.num_experts = dn_.experts;
    rp.mblock_cap = k.cap;
    if (rows) rp.slot_pos = addr(slot_pos_.data());
    launch_moe_w4a16_routing(*k.routing, rp, stream);

    MoeW4A16DecodeParams g{};
    g.weights = addr(gu_.bytes.data());
    g.expert_stride = gu_.expert_stride;
    g.x = addr(x);
    g.x_stride = dn_.n;
    g.k_real = gu_.k;
    g.k_pad = gu_.k_pad;
    g.n_pad = gu_.n_pad;
    g.n_real = gu_.n_pad;
    g.num_mblocks = rp.num_mblocks;
    g.mblock_info = rp.mblock_info;
    g.sorted_token = rp.sorted_token;
    g.sorted_weight = rp.sorted_weight;
    g.num_tokens = tokens;
    g.inter = addr(inter_.data());
    g.inter_stride = dn_.k_pad;
    launch_moe_w4a16_gemm(*k.gate_up, g, stream);

    MoeW4A16DecodeParams d = g;
    d.weights = addr(dn_.bytes.data());
    d.expert_stride = dn_.expert_stride;
    d.x = addr(inter_.data());
    d.x_stride = dn_.k_pad;
    d.k_real = dn_.k;
    d.k_pad = dn_.k_pad;
    d.n_pad = dn_.n_pad;
    d.n_real = dn_.n;
    d.inter = 0;
    d.inter_stride = 0;
    d.out_stride = dn_.n;
    if (rows) {
        d.out = addr(rows_.data());
    } else {
        d.acc = addr(acc_.data());
        d.acc_stride = dn_.n_pad;
        d.out = addr(out);
        d.counters = addr(counters_.data());
    }
    launch_moe_w4a16_gemm(*k.down, d, stream);
    if (!rows) return;
    MoeW4A16CombineParams cp{};
    cp.rows = addr(rows_.data());
    cp.rows_stride = dn_.n;
    cp.slot_pos = addr(slot_pos_.data());
    cp.num_tokens = tokens;
    cp.topk = opt_.topk;
    cp.n = dn_.n;
    cp.out = addr(out);
    cp.out_stride = dn_.n;
    launch_moe_w4a16_combine(*combine_, cp, stream);
}

}  // namespace kiln::jit
