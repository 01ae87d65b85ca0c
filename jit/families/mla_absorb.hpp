// Family `mla_absorb`: the per-head products of MLA with the two halves of kv_b, batched over tokens
// (templates/device/mla_absorb.cuh, templates/host/mla.hpp; parameters templates/common/mla_absorb_params.h).
//   mode q:   qt[t, h] = (W_UK^hᵀ q_nope[t, h], q_rope[t, h])  the absorbed query the attention reads
//   mode out: o[t, h] = W_UV^h ō[t, h], times sigmoid(gate[t, h]) when a gate is given (K3's output gate)
// kv_b is the checkpoint's [heads x (d_n + d_v), d_c] bf16 matrix as is. Dims are launch parameters (at
// most 1024 each, d_c even); nothing baked in.
#pragma once

#include "common/mla_absorb_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

enum class MlaAbsorbMode : uint8_t { q = 0, out = 1 };

class MlaAbsorbFamily final : public Family {
public:
    static constexpr std::string_view k_name = "mla_absorb";

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "mla: per-head products with kv_b (absorbed query W_UKᵀ q, output W_UV ō with the gate)";
    }
    std::vector<std::string> modes() const override { return {"q", "out"}; }
    std::string_view dims() const override { return "none"; }
    std::span<const ConfigField> config_fields() const override { return {}; }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(MlaAbsorbMode mode, Target target);
};

// Throws InvalidArgument for dims out of range or strides that do not cover a row.
void launch_mla_absorb(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AbsorbParams& p);

}  // namespace kiln::jit
