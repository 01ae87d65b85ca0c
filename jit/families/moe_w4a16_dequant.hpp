// Family `moe_w4a16_dequant`: one expert matrix from the decode_mma16 layout back to bf16 [n_pad, k_pad] in
// layout row order (templates/device/moe_w4a16_dequant.cuh, templates/host/moe_w4a16.hpp; parameters
// templates/common/moe_w4a16_dequant_params.h). For tests and inspection.
#pragma once

#include <cstdint>
#include <span>

#include "common/moe_w4a16_dequant_params.h"
#include "jit/families/moe_w4a16_common.hpp"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MoeW4A16DequantConfig {
    uint8_t wide_scale = 0;  // device, MXFP4: scale bytes above 128
};

class MoeW4A16DequantFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16_dequant";
    using Config = MoeW4A16DequantConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "moe_w4a16 dequant: one expert matrix back to bf16"; }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "weight format, n (layout rows), k"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(const moe::MatrixShape& w, Target target);
};

void launch_moe_w4a16_dequant(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::DequantParams& p);

}  // namespace kiln::jit
