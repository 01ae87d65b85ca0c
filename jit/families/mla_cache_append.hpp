// Family `mla_cache_append`, mode `paged`: writes each new token's (ĉ, k_rope) row into its slot of the paged
// latent cache of one MLA layer (templates/device/mla_cache_append.cuh, templates/host/mla.hpp; parameters
// templates/common/mla_cache_append_params.h). Runs before the attention of the same step, which reads the
// chunk's own rows from the pages. Nothing baked in.
#pragma once

#include "common/mla_cache_append_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

class MlaCacheAppendFamily final : public Family {
public:
    static constexpr std::string_view k_name = "mla_cache_append";

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "mla: new tokens' latent and rope rows into their KV pages"; }
    std::vector<std::string> modes() const override { return {"paged"}; }
    std::string_view dims() const override { return "none"; }
    std::span<const ConfigField> config_fields() const override { return {}; }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(Target target);
};

// Throws InvalidArgument for dims that are not multiples of 8, strides shorter than a row, or (device) rows,
// pages or the layer offset off 16-byte alignment. Grid-stride over the tokens.
void launch_mla_cache_append(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::CacheAppendParams& p);

}  // namespace kiln::jit
