// Family `kda_prep`: KDA's per-token inputs from the projected tokens, varlen over a step (conv 4 with the
// slot's rolling conv state, SiLU, q / k L2 norms, q scale, the gate, beta; templates/device/kda_prep.cuh,
// templates/host/kda.hpp; parameters templates/common/kda_prep_params.h). Bakes in the head dim (k) and,
// on the device, the tile of tokens one warp runs (tile; default 16).
#pragma once

#include <cstdint>
#include <span>

#include "common/kda_prep_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct KdaPrepConfig {
    uint8_t tile = 0;  // device: new tokens per warp (4, 8, 16, 32 or 64; default 16)
};

class KdaPrepFamily final : public Family {
public:
    static constexpr std::string_view k_name = "kda_prep";
    using Config = KdaPrepConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "KDA inputs: causal conv 4 with the slot's conv state, SiLU, L2 norms, gate, beta (varlen)";
    }
    std::vector<std::string> modes() const override { return {"varlen"}; }
    std::string_view dims() const override { return "k (head dim)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int head_dim, Target target, int tile = 0);
};

// One warp per (tile of a sequence's new tokens, head). Throws InvalidArgument when `p` does not fit.
void launch_kda_prep(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaPrepParams& p);

}  // namespace kiln::jit
