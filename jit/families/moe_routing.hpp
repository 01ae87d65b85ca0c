// Family `moe_routing`, mode `indexed`: routing prep for the indexed MoE kernels
// (templates/device/moe_routing.cuh, templates/host/moe_routing.hpp, parameters in
// templates/common/moe_routing_params.h). Bakes in experts, topk, block_m and (device) warps; m, n, k unused.
//
// Given top-k expert ids [M, topk] it produces, on the device and in one launch: the flat row indices
// grouped by expert (stable) with each expert padded to block_m rows (sentinel M*topk), the expert of
// every block_m-row block (-1 past the end), tokens per expert, and the total padded row count.
#pragma once

#include <cstdint>
#include <vector>

#include "common/moe_routing_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct MoeRoutingConfig {
    uint16_t block_m = 0;  // rows each expert is padded to (default 64)
    uint8_t warps = 0;     // warps of the one CTA (device; default from the expert count)
    uint8_t reserved = 0;
};

class MoeRoutingFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_routing";
    static constexpr int k_max_experts = 4096;
    using Config = MoeRoutingConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "MoE routing prep: top-k ids -> per-expert rows padded to block_m, block experts, counts";
    }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "experts, topk"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;  // templates/host/moe_routing.hpp

    // A canonical descriptor; block_m = 0 / warps = 0 pick the defaults.
    static KernelDescriptor descriptor(int experts, int topk, Target target, int block_m = 0, int warps = 0);
};

// Rows sorted_ids must hold for `tokens` tokens: sum over experts of count rounded up to block_m is at
// most tokens*topk + min(experts, tokens*topk) * (block_m - 1); rounded up to block_m.
int64_t moe_routing_capacity(int64_t tokens, int topk, int experts, int block_m);

struct MoeRoutingArgs {
    runtime::TensorView topk_ids;           // i32 [M, topk]
    runtime::TensorView sorted_ids;         // i32 [capacity >= moe_routing_capacity(M, ...)]
    runtime::TensorView block_expert;       // i32 [>= capacity / block_m]
    runtime::TensorView tokens_per_expert;  // i32 [experts]
    runtime::TensorView total_padded;       // i32 [1]
};

// Checks every view against the kernel's descriptor and `where` (InvalidArgument) and fills the parameters.
kiln_params::MoeRoutingParams moe_routing_params(const LoadedKernel& k, const MoeRoutingArgs& a, runtime::Location where);
// moe_routing_params for the stream's memory (nothing is enqueued when it throws), then the launch, device or host.
void launch_moe_routing(const LoadedKernel& k, runtime::Stream& stream, const MoeRoutingArgs& a);

// CPU reference with the same outputs (stable order, same sentinel and -1 fill).
struct MoeRoutingResult {
    std::vector<int32_t> sorted_ids, block_expert, tokens_per_expert;
    int32_t total_padded = 0;
};
MoeRoutingResult moe_routing_reference(const std::vector<int32_t>& topk_ids, int64_t tokens, int topk, int experts,
                                       int block_m, int64_t capacity, int64_t max_blocks);

}  // namespace kiln::jit
