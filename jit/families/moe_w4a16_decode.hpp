// Family `moe_w4a16_decode`: one routed-expert GEMM of a decode-sized call on its persistent schedule
// (templates/device/moe_w4a16_decode.cuh, templates/host/moe_w4a16.hpp; parameters
// templates/common/moe_w4a16_decode_params.h). gate_up: n = layout rows (2 x intermediate, padded), k =
// hidden, the SiLU-GLU or SiTU-GLU epilogue into the bf16 intermediate; down: n = hidden padded, k = the
// intermediate, router-weighted, combined per token with fp32 atomics or (rows) written as one bf16 row per
// routed row for moe_w4a16_combine. Device: one CTA of 640 threads per SM (4 warp groups, each a producer
// warp feeding a ring of `stages` stages of block_k inputs to 4 consumer warps), static per-SM shares or
// dynamic item claiming. Host: the same result on the thread pool; bakes in format, n, k, block_m, the
// activation and rows (the device-only fields are zero there).
#pragma once

#include <cstdint>
#include <span>

#include "common/moe_w4a16_decode_params.h"
#include "jit/families/moe_w4a16_common.hpp"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MoeW4A16DecodeConfig {
    uint8_t matrix = 0;      // moe::Matrix
    uint8_t act = 0;         // moe::Activation (gate_up)
    uint8_t block_m = 0;     // rows per m-block: 8, 16 or 32 (token tiles of 8; default 8)
    uint8_t stages = 0;      // ring stages per warp group (device; default: the deepest that fits)
    uint16_t block_k = 0;    // inputs per stage: 64, 128 or 256 (device; default: 256 where a two-stage ring
                             // and K allow, else 128 where K allows, else 64)
    uint8_t dynamic = 0;     // device: items claimed dynamically instead of static per-SM shares
    uint8_t rows = 0;        // down: one bf16 row per routed row (for moe_w4a16_combine)
    uint8_t wide_scale = 0;  // device, MXFP4: scale bytes above 128 (the weights say; two multiplies)
    uint8_t mask_k = 0;      // derived: K is not a multiple of 64
    uint16_t reserved = 0;
};

class MoeW4A16DecodeFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16_decode";
    using Config = MoeW4A16DecodeConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "moe_w4a16 decode GEMM: gate_up with the GLU, or down (combined or rows), INT4 / MXFP4 group-32";
    }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "weight format, n (layout rows), k"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(moe::Matrix which, const moe::MatrixShape& w, moe::Activation act, int block_m,
                                       Target target, bool dynamic = false, bool rows = false, int block_k = 0,
                                       int stages = 0);
};

// Persistent launch: one CTA per compute unit of the stream's backend, as a programmatic dependent of the
// previous kernel. Throws InvalidArgument when `p` does not match the kernel's matrix.
void launch_moe_w4a16_decode(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::DecodeParams& p);

}  // namespace kiln::jit
