// Family `kda_out_norm`: KDA's gated output RMSNorm per token and head, fp32 in, bf16 out
// (templates/device/kda_out_norm.cuh, templates/host/kda.hpp; parameters templates/common/kda_out_norm_params.h).
// Bakes in the head dim (k).
#pragma once

#include <cstdint>
#include <span>

#include "common/kda_out_norm_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct KdaOutNormConfig {
    uint8_t unused = 0;
};

class KdaOutNormFamily final : public Family {
public:
    static constexpr std::string_view k_name = "kda_out_norm";
    using Config = KdaOutNormConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "KDA output: RMSNorm(o_h) x o_norm x sigmoid(gate_h), bf16"; }
    std::vector<std::string> modes() const override { return {"varlen"}; }
    std::string_view dims() const override { return "k (head dim)"; }
    std::span<const ConfigField> config_fields() const override { return {}; }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int head_dim, Target target);
};

// One warp per (token, head).
void launch_kda_out_norm(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaOutNormParams& p);

}  // namespace kiln::jit
