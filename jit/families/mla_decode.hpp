// Family `mla_decode`, mode `paged`: absorbed MLA attention of single new tokens over the paged latent cache,
// the context split into pieces (flash-decoding; mla_combine merges them). One CTA per (token, block of
// heads_per_cta heads, piece) reads each key tile once for its heads (templates/device/mla_attention.cuh,
// templates/host/mla.hpp; parameters templates/common/mla_attention_params.h). Bakes in n = d_c and k = d_r
// and (device) heads_per_cta and mma (CUDA-core FMAs, or bf16 mma.sync over 64-key tiles with 32 heads per CTA);
// the host kernel is the same for decode and prefill.
#pragma once

#include <cstdint>

#include "common/mla_attention_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MlaDecodeConfig {
    uint8_t heads_per_cta = 0;  // device: 8, 16, 24 or 32 query rows per CTA (default 16; 32 with mma)
    uint8_t mma = 0;            // device: 1 = bf16 tensor cores (mma.sync, templates/device/mla_attention_mma.cuh)
};

class MlaDecodeFamily final : public Family {
public:
    static constexpr std::string_view k_name = "mla_decode";
    using Config = MlaDecodeConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "mla: absorbed attention of decode tokens over the paged latent cache, context in pieces";
    }
    std::vector<std::string> modes() const override { return {"paged"}; }
    std::string_view dims() const override { return "n (kv_lora_rank), k (qk_rope_head_dim)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    // All of the unified L1 as shared memory: the key ring and the queries (two CTAs per SM, or one with mma).
    uint32_t preferred_smem_carveout(const KernelDescriptor&) const override { return 100; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int d_c, int d_r, Target target, int heads_per_cta = 0, bool mma = false);
};

// Checks `p` against the kernel (heads, pieces in [1, 64], split_keys a positive multiple of 64, the selector,
// the page layout, device alignment; InvalidArgument), then launches (num_tokens x head blocks, splits).
// split_keys x splits must cover every served token's position + 1 (the layer's plan sees to it).
void launch_mla_decode(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AttentionParams& p);

// The checks shared with mla_prefill.
void check_mla_attention(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AttentionParams& p,
                         std::string_view what);

}  // namespace kiln::jit
