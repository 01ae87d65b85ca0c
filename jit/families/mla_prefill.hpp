// Family `mla_prefill`, mode `paged`: absorbed MLA attention of prefill chunks (and any multi-token step of a
// sequence) over the paged latent cache: the cached prefix and the chunk's own rows (appended to the pages
// first), causal by position, varlen. One CTA per (sequence, block of tokens_per_cta of its new tokens, block
// of heads_per_cta heads, context piece): the block's tokens share every key tile (templates/device/
// mla_attention.cuh, templates/host/mla.hpp; parameters templates/common/mla_attention_params.h, the same as
// mla_decode). This is the absorbed form (MQA over the 576-wide latent keys); the expanded form with 192-wide
// query-key and 128-wide value heads is not built. Bakes in n = d_c, k = d_r and (device) the CTA shape and
// mma (CUDA-core FMAs, or bf16 mma.sync over 64-key tiles with 32 query rows per CTA).
#pragma once

#include <cstdint>

#include "common/mla_attention_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct MlaPrefillConfig {
    uint8_t tokens_per_cta = 0;  // device: 1, 2 or 4 (default 4)
    uint8_t heads_per_cta = 0;   // device: tokens x heads is 8, 16, 24 or 32 query rows (default 8; 32 rows with mma)
    uint8_t mma = 0;             // device: 1 = bf16 tensor cores (mma.sync, templates/device/mla_attention_mma.cuh)
};

class MlaPrefillFamily final : public Family {
public:
    static constexpr std::string_view k_name = "mla_prefill";
    using Config = MlaPrefillConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "mla: absorbed causal attention of prefill chunks over the paged latent cache (cached prefix + chunk)";
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

    static KernelDescriptor descriptor(int d_c, int d_r, Target target, int tokens_per_cta = 0, int heads_per_cta = 0,
                                       bool mma = false);
};

// The checks of launch_mla_decode, then (num_seqs x token blocks of max_new_tokens x head blocks, splits).
void launch_mla_prefill(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AttentionParams& p);

}  // namespace kiln::jit
