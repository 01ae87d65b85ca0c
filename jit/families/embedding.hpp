// Family `embedding` (templates/device/embedding.cuh, templates/host/embedding.hpp, parameters
// templates/common/embedding_params.h): token ids i32 -> bf16 rows of the table, with the feed map of
// overlap scheduling (a sequence whose first new token the previous step sampled on the device reads it
// from that step's token array) and an optional vocab shard offset. Shapes are launch arguments.
#pragma once

#include <cstdint>

#include "common/embedding_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct EmbeddingConfig {
    uint16_t threads = 0;  // device CTA threads, one CTA per token (default 128)
};

class EmbeddingFamily final : public Family {
public:
    static constexpr std::string_view k_name = "embedding";
    using Config = EmbeddingConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override { return "token ids -> bf16 embedding rows, with fed tokens"; }
    std::vector<std::string> modes() const override { return {"gather"}; }
    std::string_view dims() const override { return "none (shapes are launch arguments)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(Target target, int threads = 0);
};

struct EmbeddingArgs {
    runtime::TensorView ids;          // i32 [T]
    runtime::TensorView table;        // bf16 [V, dim], dim a multiple of 8
    runtime::TensorView out;          // bf16 [T, dim]
    runtime::TensorView feed;         // i32 [F, 2] (token row, index into prev_tokens); empty: none
    runtime::TensorView prev_tokens;  // i32 [P]; needed with a feed
    runtime::TensorView ids_out;      // optional i32 [T]
    int64_t vocab_start = 0;          // the first id of this table's shard
};

kiln_params::EmbeddingParams embedding_params(const LoadedKernel& k, const EmbeddingArgs& a, runtime::Location where);
void launch_embedding(const LoadedKernel& k, runtime::Stream& stream, const EmbeddingArgs& a);

}  // namespace kiln::jit
