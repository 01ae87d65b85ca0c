// Family `kda_chunk`: the KDA delta rule chunkwise (chunk 64 at absolute multiples of 64) over a step's
// prefill sequences, the fp32 state from and back to each working slot, snapshot states into their slots
// (templates/device/kda_chunk.cuh, templates/host/kda.hpp; parameters templates/common/kda_chunk_params.h).
// Bakes in the head dim (k); nothing else.
#pragma once

#include <cstdint>
#include <span>

#include "common/kda_chunk_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct KdaChunkConfig {
    uint8_t unused = 0;
};

class KdaChunkFamily final : public Family {
public:
    static constexpr std::string_view k_name = "kda_chunk";
    using Config = KdaChunkConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "KDA chunked prefill: chunk-64 delta rule, fp32 state in the slot, snapshots (varlen)";
    }
    std::vector<std::string> modes() const override { return {"varlen"}; }
    std::string_view dims() const override { return "k (head dim)"; }
    std::span<const ConfigField> config_fields() const override { return {}; }
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor& d) const override;
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int head_dim, Target target);
};

// One CTA per (sequence, head, 32 value columns); sequences of one token are skipped when p.skip_single.
void launch_kda_chunk(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaChunkParams& p);

}  // namespace kiln::jit
