// Family `moe_w4a16_prefill`: one routed-expert GEMM of a prefill-sized call (templates/device/
// moe_w4a16_prefill.cuh, moe_w4a16_prefill_wgmma.cuh, moe_w4a16_prefill_wgmma_ws.cuh; parameters
// templates/common/moe_w4a16_decode_params.h). One CTA per (m-block, block_n columns) for the m-block
// capacity the routing was given (CTAs past the device-side m-block count exit at once); down always writes
// router-weighted bf16 rows for moe_w4a16_combine.
//   block_m 64, mma sync   mma.sync m16n8k16, 256 threads, two CTAs per SM
//   block_m 64, mma wgmma  warpgroup MMAs (sm_90a) with the dequantised weights in registers; `wide`: two
//                          128-row super-blocks side by side (512 threads, one CTA per SM)
//   block_m 128 / 192      the warp-specialised wgmma kernel: a producer warpgroup feeds a ring of one-record
//                          slots (`stages`) through mbarriers to two consumer warpgroups, 384 threads, one CTA
//                          per SM; its gate_up folds the router weight into the intermediate and its down writes
//                          rows as tiles of 64 columns, so both run as a pair with the same block_m
// Host: the decode family's host GEMM with block_m 64 (the same computation).
#pragma once

#include <cstdint>
#include <span>

#include "common/moe_w4a16_decode_params.h"
#include "jit/families/moe_w4a16_common.hpp"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

enum class MoeMma : uint8_t { sync = 0, wgmma = 1 };

struct MoeW4A16PrefillConfig {
    uint8_t matrix = 0;       // moe::Matrix
    uint8_t act = 0;          // moe::Activation (gate_up)
    uint8_t block_m = 0;      // rows per m-block: 64, or 128 / 192 (the warp-specialised kernel); default 64
    uint8_t mma = 0;          // MoeMma (device)
    uint8_t wide = 0;         // block_m 64 wgmma: two super-blocks side by side (kept where a CTA walks one of two+)
    uint8_t stages = 0;       // weight ring stages / slots (device; default: the deepest that fits)
    uint16_t block_k = 0;     // derived: inputs per K step
    uint16_t block_n = 0;     // derived: layout rows per CTA
    uint8_t wide_scale = 0;   // device, MXFP4: scale bytes above 128
    uint8_t mask_k = 0;       // derived: gate_up K is not a multiple of 64
    uint8_t ctas_per_sm = 0;  // derived
    uint8_t warps = 0;        // derived
};

class MoeW4A16PrefillFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16_prefill";
    using Config = MoeW4A16PrefillConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "moe_w4a16 prefill GEMM: gate_up with the GLU or down rows, mma.sync / wgmma / warp-specialised";
    }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "weight format, n (layout rows), k"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    uint32_t preferred_smem_carveout(const KernelDescriptor&) const override { return 100; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(moe::Matrix which, const moe::MatrixShape& w, moe::Activation act, Target target,
                                       MoeMma mma = MoeMma::sync, bool wide = false, int block_m = 64);
    // Whether a descriptor names the warp-specialised kernel (block_m 128 / 192).
    static bool warp_specialised(const KernelDescriptor& d) { return d.config.as<Config>().block_m > 64; }
};

// Launches mblock_cap x (n / block_n) CTAs. Throws InvalidArgument when `p` does not match the kernel or the
// grid overflows.
void launch_moe_w4a16_prefill(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::moe::DecodeParams& p,
                              int mblock_cap);

}  // namespace kiln::jit
