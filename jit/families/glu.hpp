// Family `glu` (templates/device/glu.cuh, templates/host/glu.hpp, parameters templates/common/glu_params.h):
// elementwise gates in fp32 over bf16. Modes `silu` (SiLU(gate)·up) and `situ` (SiTU, k3-model §6) read a
// fused [gate | up] matrix [M, 2I] and write [M, I]; `sigmoid_gate` writes o ⊙ sigmoid(g) (the MLA and KDA
// output gates where no norm is fused). Shapes and β are launch arguments.
#pragma once

#include <cstdint>

#include "common/glu_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct GluConfig {
    uint16_t threads = 0;  // device CTA threads (default 256); the grid is sized from the element count
};

enum class GluMode : uint8_t { silu = 0, situ = 1, sigmoid_gate = 2 };

class GluFamily final : public Family {
public:
    static constexpr std::string_view k_name = "glu";
    using Config = GluConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "SiLU-GLU, SiTU-GLU from [gate | up], and o * sigmoid(g)"; }
    std::vector<std::string> modes() const override { return {"silu", "situ", "sigmoid_gate"}; }
    std::string_view dims() const override { return "none (shapes are launch arguments)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(GluMode mode, Target target, int threads = 0);
};

struct GluArgs {
    runtime::TensorView in;    // silu, situ: bf16 [M, 2I] (rows may be strided); sigmoid_gate: o bf16 [M, N]
    runtime::TensorView gate;  // sigmoid_gate: g bf16 [M, N] (rows may be strided)
    runtime::TensorView out;   // bf16 [M, I] / [M, N], contiguous
    float beta = 4.0f;         // situ
    float linear_beta = 25.0f; // situ; <= 0: no cap on the up branch
};

kiln_params::GluParams glu_params(const LoadedKernel& k, const GluArgs& a, runtime::Location where);
void launch_glu(const LoadedKernel& k, runtime::Stream& stream, const GluArgs& a);

}  // namespace kiln::jit
