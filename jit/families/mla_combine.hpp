// Family `mla_combine`, mode `pieces`: merges the context pieces of the MLA attention for the tokens with
// more than one (templates/device/mla_combine.cuh, templates/host/mla.hpp; parameters
// templates/common/mla_combine_params.h). Nothing baked in.
#pragma once

#include "common/mla_combine_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

class MlaCombineFamily final : public Family {
public:
    static constexpr std::string_view k_name = "mla_combine";

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "mla: merges the attention's context pieces (log-sum-exp)"; }
    std::vector<std::string> modes() const override { return {"pieces"}; }
    std::string_view dims() const override { return "none"; }
    std::span<const ConfigField> config_fields() const override { return {}; }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(Target target);
};

// Throws InvalidArgument for pieces outside [1, 64], split_keys not a positive multiple of 64, or d_c not a
// positive multiple of 4. Grid-stride over the (token, head) rows.
void launch_mla_combine(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::CombineParams& p);

}  // namespace kiln::jit
