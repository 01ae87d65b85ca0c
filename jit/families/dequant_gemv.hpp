// Family `dequant_gemv`, mode `dense`: y[m, N] = x[m, K] * dequant(W)[N, K]^T for INT4 group-32 weights
// with bf16 scales in the compressed-tensors pack-quantized layout (templates/device/dequant_gemv.cuh):
// weight_packed i32 [N, K/8] (eight codes per word, LSB first, code = q + 8), weight_scale bf16 [N, K/32].
// Bakes in N, K, the M-bucket (1..16: the largest m a launch may pass) and (device) warps, rows per CTA.
// Parameters: templates/common/dequant_gemv_params.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dequant_gemv_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct DequantGemvConfig {
    uint8_t warps = 0;  // output rows per CTA, one per warp (device; default 8)
};

class DequantGemvFamily final : public Family {
public:
    static constexpr std::string_view k_name = "dequant_gemv";
    static constexpr int k_max_m = 16;
    using Config = DequantGemvConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "bf16 GEMV over INT4 group-32 weights with bf16 scales (compressed-tensors), fp32 accumulation";
    }
    std::vector<std::string> modes() const override { return {"dense"}; }
    std::string_view dims() const override { return "m (bucket, 1..16), n, k (multiple of 32)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;  // templates/host/dequant_gemv.hpp

    static KernelDescriptor descriptor(int m_bucket, int n, int k, Target target, int warps = 0);
};

struct DequantGemvArgs {
    runtime::TensorView x;             // bf16 [m, K], m <= the descriptor's M-bucket
    runtime::TensorView weight_packed; // i32 [N, K/8]
    runtime::TensorView weight_scale;  // bf16 [N, K/32]
    runtime::TensorView y;             // bf16 [m, N]
};

// Checks every view against the kernel and `where` (InvalidArgument) and fills the parameters.
kiln_params::DequantGemvParams dequant_gemv_params(const LoadedKernel& k, const DequantGemvArgs& a, runtime::Location where);
// dequant_gemv_params for the stream's memory (nothing is enqueued when it throws), then the launch.
void launch_dequant_gemv(const LoadedKernel& k, runtime::Stream& stream, const DequantGemvArgs& a);

// fp64 reference: y[m * N + n]. x and scales are bf16 bit patterns.
std::vector<double> dequant_gemv_reference(const std::vector<uint16_t>& x, int m, const std::vector<int32_t>& packed,
                                           const std::vector<uint16_t>& scale, int n, int k);

}  // namespace kiln::jit
