// Family `moe_w4a16_decode_fused`: a whole decode call in one persistent launch (templates/device/
// moe_w4a16_decode.cuh, moe_w4a16_decode_fused; parameters templates/common/moe_w4a16_decode_fused_params.h):
// the routing computed in every CTA's shared memory, every gate_up item, every down item in the rows mode,
// and the per-token combine. The descriptor names the gate_up matrix (n = 2 x intermediate padded, k =
// hidden); down's K is n / 2. A device-only family: on the host target the layer runs route, decode and
// combine instead (the same result).
#pragma once

#include <cstdint>
#include <span>

#include "common/moe_w4a16_decode_fused_params.h"
#include "jit/families/moe_w4a16_common.hpp"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MoeW4A16DecodeFusedConfig {
    uint8_t act = 0;         // moe::Activation
    uint8_t block_m = 0;     // rows per m-block: 8, 16 or 32 (default 8)
    uint8_t stages = 0;      // ring stages per warp group (default: the deepest that fits)
    uint8_t wide_scale = 0;  // MXFP4 scale bytes above 128
    uint16_t block_k = 0;    // inputs per stage: 64, 128 or 256 (default: 256 where gate_up's and down's K and a
                             // two-stage ring allow, else 128 where K allows, else 64)
    uint8_t mask_k = 0;      // derived: K is not a multiple of 64
    uint8_t reserved = 0;
};

class MoeW4A16DecodeFusedFamily final : public Family {
public:
    static constexpr std::string_view k_name = "moe_w4a16_decode_fused";
    using Config = MoeW4A16DecodeFusedConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "moe_w4a16 fused decode: routing, gate_up, down rows and combine in one persistent launch";
    }
    std::vector<std::string> modes() const override { return {"indexed"}; }
    std::string_view dims() const override { return "weight format, n (gate_up layout rows), k (hidden)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool device_only() const override { return true; }

    static KernelDescriptor descriptor(const moe::MatrixShape& gate_up, moe::Activation act, int block_m, Target target,
                                       int stages = 0, int block_k = 0);
    // Whether gate_up weights of layout rows n and inputs k have a fused kernel: down's K (n / 2) and k must be
    // whole numbers of its stages (block_k inputs; 0: the default).
    static bool fusable(int n, int k, int block_k = 0);
    // Whether k_groups (1, 2 or 4) warp groups can share each item: m-blocks of up to 16 rows, and every part
    // of gate_up's and down's K stages holds at least one stage.
    static bool k_groups_ok(const KernelDescriptor& fused, int k_groups);
    // Dynamic shared memory of one call of `slots` routed slots (M x topk, other ranks' ids included) over
    // `experts` local experts with `mblock_cap` m-blocks: the ring, then the routing; with k_groups > 1 the
    // teams' claim slots and partial sums after it. 0 where the call does not fit (227 KB, 65,535 slots, top-k 32).
    static uint32_t call_smem(const KernelDescriptor& fused, int64_t slots, int experts, int mblock_cap, int topk,
                              int k_groups = 1);
};

// One CTA per SM with call_smem bytes of shared memory; throws InvalidArgument where the call does not fit
// or the parameters do not chain.
void launch_moe_w4a16_decode_fused(const LoadedKernel& k, runtime::Stream& stream,
                                   const kiln_params::moe::FusedDecodeParams& p);

}  // namespace kiln::jit
