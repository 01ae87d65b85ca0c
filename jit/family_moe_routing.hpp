// Family `moe_routing`, mode `indexed`: routing prep for the indexed MoE kernels
// (templates/device/moe_routing.cuh). Bakes in experts, topk, block_m and warps; m, n and k are unused.
//
// Given top-k expert ids [M, topk] it produces, on the device and in one launch: the flat row indices
// grouped by expert (stable) with each expert padded to block_m rows (sentinel M*topk), the expert of
// every block_m-row block (-1 past the end), tokens per expert, and the total padded row count.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda.h>

#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

class MoeRoutingFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_routing";
    static constexpr int k_max_experts = 4096;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "MoE routing prep: top-k ids -> per-expert rows padded to block_m, block experts, counts";
    }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "experts, topk; config block_m (bm), warps (wp)"; }
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
    runtime::TensorView topk_ids;           // i32 [M, topk], device
    runtime::TensorView sorted_ids;         // i32 [capacity >= moe_routing_capacity(M, ...)], device
    runtime::TensorView block_expert;       // i32 [>= capacity / block_m], device
    runtime::TensorView tokens_per_expert;  // i32 [experts], device
    runtime::TensorView total_padded;       // i32 [1], device
};

// Checks every view against the descriptor (InvalidArgument), in `where` memory; returns the tokens.
// The device launch below and the host one (host_launch.hpp) both start with it.
int64_t check_moe_routing_args(const KernelDescriptor& d, const MoeRoutingArgs& a, runtime::Location where);

// Checks every view against the kernel's descriptor (InvalidArgument), then launches on `stream`.
void launch_moe_routing(const LoadedKernel& k, const MoeRoutingArgs& a, CUstream stream);

// CPU reference with the same outputs (stable order, same sentinel and -1 fill).
struct MoeRoutingResult {
    std::vector<int32_t> sorted_ids, block_expert, tokens_per_expert;
    int32_t total_padded = 0;
};
MoeRoutingResult moe_routing_reference(const std::vector<int32_t>& topk_ids, int64_t tokens, int topk, int experts,
                                       int block_m, int64_t capacity, int64_t max_blocks);

}  // namespace kiln::jit
