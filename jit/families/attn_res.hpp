// Family `attn_res` (templates/device/attn_res.cuh, templates/host/attn_res.hpp, parameters
// templates/common/attn_res_params.h): the Attention Residuals mix of one site (k3-model §4.2) over every
// token row: fp32 scores of the candidates (the banked blocks, then the current partial sum) against the
// folded pseudo-query γ ⊙ w, a softmax, and the weighted sum of the raw candidates. At most 16 candidates;
// shapes are launch arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "common/attn_res_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct AttnResConfig {
    uint16_t threads = 0;  // device CTA threads, one CTA per token row (default 256)
};

class AttnResFamily final : public Family {
public:
    static constexpr std::string_view k_name = "attn_res";
    static constexpr int k_max_candidates = 16;
    using Config = AttnResConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "Attention Residuals: fp32 softmax scores of banked blocks and the partial sum, raw weighted sum";
    }
    std::vector<std::string> modes() const override { return {"mix"}; }
    std::string_view dims() const override { return "none (shapes are launch arguments)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(Target target, int threads = 0);
};

struct AttnResArgs {
    runtime::TensorView bank;     // bf16 [blocks, >= rows, dim] (blocks may be 0: empty view)
    int blocks = 0;               // banked blocks used (the first `blocks` of bank)
    runtime::TensorView current;  // bf16 [rows, dim]
    runtime::TensorView score;    // f32 [dim]: norm weight ⊙ pseudo-query
    runtime::TensorView out;      // bf16 [rows, dim]
    float eps = 1e-5f;
};

kiln_params::AttnResParams attn_res_params(const LoadedKernel& k, const AttnResArgs& a, runtime::Location where);
void launch_attn_res(const LoadedKernel& k, runtime::Stream& stream, const AttnResArgs& a);

// The folded score vector of a site: γ[c] · w[c] in fp32.
std::vector<float> attn_res_fold(const std::vector<float>& norm, const std::vector<float>& proj);

}  // namespace kiln::jit
