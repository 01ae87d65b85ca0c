#include "jit/host_launch.hpp"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

static void expect_host_kernel(const LoadedKernel& k, std::string_view family) {
    if (k.desc.family.view() != family || !k.desc.target.is_host() || k.host_entry == nullptr)
        throw InvalidArgument(fmt::format("launch_{}: kernel {} is not a loaded host-target {} kernel", family,
                                          to_string(k.desc), family));
}

MoeRoutingHostArgs pack_moe_routing(const LoadedKernel& k, const MoeRoutingArgs& a) {
    expect_host_kernel(k, MoeRoutingFamily::k_name);
    const KernelDescriptor& d = k.desc;
    const int64_t tokens = check_moe_routing_args(d, a, Location::host);

    MoeRoutingHostArgs h{};
    h.topk_ids = a.topk_ids.ptr<const int32_t>();
    h.sorted_ids = a.sorted_ids.ptr<int32_t>();
    h.block_expert = a.block_expert.ptr<int32_t>();
    h.tokens_per_expert = a.tokens_per_expert.ptr<int32_t>();
    h.total_padded = a.total_padded.ptr<int32_t>();
    h.num_tokens = static_cast<int32_t>(tokens);
    h.sorted_capacity = static_cast<int32_t>(std::min<int64_t>(a.sorted_ids.shape[0], INT32_MAX));
    h.max_blocks = static_cast<int32_t>(std::min<int64_t>(a.block_expert.shape[0], INT32_MAX));
    return h;
}

void launch_moe_routing(const LoadedKernel& k, const MoeRoutingArgs& a, runtime::HostStream& stream) {
    MoeRoutingHostArgs h = pack_moe_routing(k, a);
    stream.launch(k.host_entry, &h, sizeof h, to_string(k.desc), k.host_scratch_bytes);
}

DequantGemvHostArgs pack_dequant_gemv(const LoadedKernel& k, const DequantGemvArgs& a) {
    expect_host_kernel(k, DequantGemvFamily::k_name);
    const KernelDescriptor& d = k.desc;
    const int64_t m = check_dequant_gemv_args(d, a, Location::host);

    DequantGemvHostArgs h{};
    h.x = a.x.ptr<const uint16_t>();
    h.weight_packed = a.weight_packed.ptr<const uint32_t>();
    h.weight_scale = a.weight_scale.ptr<const uint16_t>();
    h.y = a.y.ptr<uint16_t>();
    h.m = static_cast<int32_t>(m);
    return h;
}

void launch_dequant_gemv(const LoadedKernel& k, const DequantGemvArgs& a, runtime::HostStream& stream) {
    DequantGemvHostArgs h = pack_dequant_gemv(k, a);
    stream.launch(k.host_entry, &h, sizeof h, to_string(k.desc), k.host_scratch_bytes);
}

static void expect_host_moe(const LoadedKernel& k, MoeW4A16Kernel want, const char* what) {
    expect_host_kernel(k, MoeW4A16Family::k_name);
    if (MoeW4A16Family::kind(k.desc) != want)
        throw InvalidArgument(fmt::format("{}: kernel is {}", what, to_string(k.desc)));
}

void launch_moe_w4a16_gemm(const LoadedKernel& k, const MoeW4A16DecodeParams& p, runtime::HostStream& stream) {
    expect_host_kernel(k, MoeW4A16Family::k_name);
    const MoeW4A16Kernel which = MoeW4A16Family::kind(k.desc);
    if (which != MoeW4A16Kernel::gate_up && which != MoeW4A16Kernel::down)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_gemm: kernel is {}", to_string(k.desc)));
    const int k_pad = (k.desc.k + 63) / 64 * 64;
    if (p.n_pad != k.desc.n || p.k_pad != k_pad || p.k_real != k.desc.k)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_gemm: weights [{}, {}] do not match kernel {}", p.n_pad,
                                          p.k_real, to_string(k.desc)));
    if (p.weights == 0 || p.x == 0 || p.num_mblocks == 0 || p.mblock_info == 0 || p.sorted_token == 0)
        throw InvalidArgument("launch_moe_w4a16_gemm: null weights, activations or routing buffers");
    if (which == MoeW4A16Kernel::gate_up && p.inter == 0)
        throw InvalidArgument("launch_moe_w4a16_gemm: gate_up needs the intermediate buffer");
    const bool rows = (k.desc.config.flags & MoeW4A16Family::k_flag_rows) != 0;
    if (which == MoeW4A16Kernel::down &&
        ((!rows && p.acc == 0) || p.out == 0 || p.sorted_weight == 0 || p.n_real > p.n_pad))
        throw InvalidArgument("launch_moe_w4a16_gemm: down needs out, router weights, acc (unless in rows mode) and "
                              "n_real <= n_pad");
    stream.launch(k.host_entry, &p, sizeof p, to_string(k.desc), k.host_scratch_bytes);
}

void launch_moe_w4a16_routing(const LoadedKernel& k, const MoeW4A16RoutingParams& p, runtime::HostStream& stream) {
    expect_host_moe(k, MoeW4A16Kernel::routing, "launch_moe_w4a16_routing");
    if (p.num_experts != k.desc.experts)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_routing: {} experts, kernel built for {}", p.num_experts,
                                          k.desc.experts));
    if (p.num_tokens < 0 || p.topk < 1 || p.mblock_cap < 0)
        throw InvalidArgument("launch_moe_w4a16_routing: negative token count or capacity, or topk < 1");
    stream.launch(k.host_entry, &p, sizeof p, to_string(k.desc), k.host_scratch_bytes);
}

void launch_moe_w4a16_combine(const LoadedKernel& k, const MoeW4A16CombineParams& p, runtime::HostStream& stream) {
    expect_host_moe(k, MoeW4A16Kernel::combine, "launch_moe_w4a16_combine");
    if (p.num_tokens < 0 || p.topk < 1 || p.n < 1)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_combine: {} tokens, topk {}, {} columns", p.num_tokens,
                                          p.topk, p.n));
    if (p.num_tokens == 0) return;
    if (p.rows == 0 || p.slot_pos == 0 || p.out == 0)
        throw InvalidArgument("launch_moe_w4a16_combine: null rows, slot positions or output");
    stream.launch(k.host_entry, &p, sizeof p, to_string(k.desc), k.host_scratch_bytes);
}

void launch_moe_w4a16_dequant(const LoadedKernel& k, const MoeW4A16DequantParams& p, runtime::HostStream& stream) {
    expect_host_moe(k, MoeW4A16Kernel::dequant, "launch_moe_w4a16_dequant");
    if (p.n_pad != k.desc.n || p.k_pad != (k.desc.k + 63) / 64 * 64)
        throw InvalidArgument(fmt::format("launch_moe_w4a16_dequant: matrix [{}, {}] does not match kernel {}", p.n_pad,
                                          p.k_pad, to_string(k.desc)));
    stream.launch(k.host_entry, &p, sizeof p, to_string(k.desc), k.host_scratch_bytes);
}

}  // namespace kiln::jit

