// Family `router` (templates/device/router.cuh, templates/host/router.hpp, parameters
// templates/common/router_params.h): the LatentMoE router after its fp32 matmul (k3-model §5): sigmoid,
// top-k on the biased scores (bias for the choice only), the unbiased scores renormalised and scaled.
// Writes topk_ids i32 / topk_weights f32 [M, k] as moe_w4a16 reads them. Bakes in experts and top-k.
#pragma once

#include <cstdint>

#include "common/router_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct RouterConfig {
    uint8_t warps = 0;  // device: token rows per CTA, one warp each (default 4)
};

class RouterFamily final : public Family {
public:
    static constexpr std::string_view k_name = "router";
    static constexpr int k_max_experts = 4096;
    static constexpr int k_max_topk = 32;
    using Config = RouterConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "MoE router: sigmoid, top-k on score + bias, renormalised unbiased weights x scaling factor";
    }
    std::vector<std::string> modes() const override { return {"sigmoid_topk"}; }
    std::string_view dims() const override { return "experts, topk"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int experts, int topk, Target target, int warps = 0);
};

struct RouterArgs {
    runtime::TensorView logits;        // f32 [M, experts]
    runtime::TensorView bias;          // optional f32 [experts] (e_score_correction_bias)
    runtime::TensorView topk_ids;      // i32 [M, topk]
    runtime::TensorView topk_weights;  // f32 [M, topk]
    bool renormalize = true;
    float routed_scaling_factor = 1.0f;
};

kiln_params::RouterParams router_params(const LoadedKernel& k, const RouterArgs& a, runtime::Location where);
void launch_router(const LoadedKernel& k, runtime::Stream& stream, const RouterArgs& a);

}  // namespace kiln::jit
