// Family `rmsnorm` (templates/device/rmsnorm.cuh, templates/host/rmsnorm.hpp, parameters
// templates/common/rmsnorm_params.h): fp32 RMSNorm over bf16 rows. Modes `rows` (y = norm(x) ⊙ w),
// `add` (s = x + r written, y = norm(s) ⊙ w: the pre-norm residual) and `heads` (one norm per head of
// `group` values with one shared weight, optionally times sigmoid(gate): the KDA output norm). Shapes and
// eps are launch arguments; the kernel bakes in only the mode and (device) the CTA size.
#pragma once

#include <cstdint>

#include "common/rmsnorm_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct RmsNormConfig {
    uint16_t threads = 0;  // device CTA threads (rows, add: one CTA per row; heads: a warp per head); default 256
};

enum class RmsNormMode : uint8_t { rows = 0, add = 1, heads = 2 };

class RmsNormFamily final : public Family {
public:
    static constexpr std::string_view k_name = "rmsnorm";
    using Config = RmsNormConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "RMSNorm in fp32 over bf16 rows: plain, with the residual add, per head with a sigmoid gate";
    }
    std::vector<std::string> modes() const override { return {"rows", "add", "heads"}; }
    std::string_view dims() const override { return "none (shapes are launch arguments)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(RmsNormMode mode, Target target, int threads = 0);
};

struct RmsNormArgs {
    runtime::TensorView x;         // bf16 [rows, cols]
    runtime::TensorView residual;  // add: bf16 [rows, cols]
    runtime::TensorView sum;       // add: bf16 [rows, cols] (may alias x or residual)
    runtime::TensorView weight;    // bf16 [cols] (rows, add) or [group] (heads)
    runtime::TensorView gate;      // heads, optional: bf16 [rows, cols]
    runtime::TensorView y;         // bf16 [rows, cols]
    float eps = 1e-5f;
};

// Checks the views against the kernel's mode and `where` (InvalidArgument) and fills the parameters; in
// heads mode the head size is weight's length.
kiln_params::RmsNormParams rmsnorm_params(const LoadedKernel& k, const RmsNormArgs& a, runtime::Location where);
void launch_rmsnorm(const LoadedKernel& k, runtime::Stream& stream, const RmsNormArgs& a);

}  // namespace kiln::jit
