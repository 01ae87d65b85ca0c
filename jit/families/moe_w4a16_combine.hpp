// Family `moe_w4a16_combine`: sums each token's router-weighted down rows in slot order, fp32 with one bf16
// rounding, deterministic (templates/device/moe_w4a16_combine.cuh, templates/host/moe_w4a16.hpp; parameters
// templates/common/moe_w4a16_combine_params.h). A token with no local row gets zeros. Nothing baked in.
#pragma once

#include <cstdint>
#include <span>

#include "common/moe_w4a16_combine_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MoeW4A16CombineConfig {
    uint8_t unused = 0;
};

class MoeW4A16CombineFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16_combine";
    using Config = MoeW4A16CombineConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "moe_w4a16 combine: per-token sum of the down rows"; }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "none"; }
    std::span<const ConfigField> config_fields() const override { return {}; }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(Target target);
};

// Work items of (token, 1024 columns), at most 16 CTAs per compute unit; a programmatic dependent of the
// previous kernel. Throws InvalidArgument for empty shapes.
void launch_moe_w4a16_combine(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::CombineParams& p);

}  // namespace kiln::jit
