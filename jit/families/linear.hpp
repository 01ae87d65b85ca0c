// Family `linear` (templates/device/linear.cuh, templates/host/linear.hpp, parameters
// templates/common/linear_params.h): y[M, N] = x[M, K] · W[N, K]ᵀ in bf16 with fp32 accumulation, bf16 or
// fp32 output (config `out`; lm_head and the router want fp32). The device kernel is a tiled mma.sync GEMM:
// the fallback where cuBLASLt is absent (runtime/cuda/cublaslt.hpp) and the reference tensor-core path;
// the host kernel is the host target's GEMM. Shapes are launch arguments (K a multiple of 8); the kernel
// bakes in the tile (block_m x block_n, warps_m x warps_n warps) and the output type.
#pragma once

#include <cstdint>

#include "common/linear_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

enum class LinearOut : uint8_t { bf16 = 0, f32 = 1 };

struct LinearConfig {
    uint16_t block_m = 0;  // device: rows of y per CTA, 16 / 32 / 64 / 128 (default 64)
    uint16_t block_n = 0;  // device: columns of y per CTA, 32 / 64 / 128 (default 64)
    uint8_t warps_m = 0;   // device: warps along M (default 2; block_m / warps_m a multiple of 16)
    uint8_t warps_n = 0;   // device: warps along N (default 2; block_n / warps_n a multiple of 8)
    uint8_t out = 0;       // LinearOut
    uint8_t reserved = 0;
};

class LinearFamily final : public Family {
public:
    static constexpr std::string_view k_name = "linear";
    using Config = LinearConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "bf16 GEMM y = x W^T, fp32 accumulation, bf16 or fp32 out (mma.sync tiles on the device)";
    }
    std::vector<std::string> modes() const override { return {"gemm"}; }
    std::string_view dims() const override { return "none (shapes are launch arguments; K a multiple of 8)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    // block_m = block_n = warps_m = warps_n = 0 pick the defaults (ignored on the host target).
    static KernelDescriptor descriptor(LinearOut out, Target target, int block_m = 0, int block_n = 0, int warps_m = 0,
                                       int warps_n = 0);
};

struct LinearArgs {
    runtime::TensorView x;  // bf16 [M, K]
    runtime::TensorView w;  // bf16 [N, K]
    runtime::TensorView y;  // bf16 or f32 (the kernel's `out`) [M, N]
};

kiln_params::LinearParams linear_params(const LoadedKernel& k, const LinearArgs& a, runtime::Location where);
void launch_linear(const LoadedKernel& k, runtime::Stream& stream, const LinearArgs& a);

}  // namespace kiln::jit
