// Family `kda_decode`: one recurrent KDA step for each sequence of a step with one new token, the fp32
// state read and written once in its working slot, copied to a snapshot slot when asked
// (templates/device/kda_decode.cuh, templates/host/kda.hpp; parameters templates/common/kda_decode_params.h).
// Bakes in the head dim (k) and, on the device, the value-column split (v_split: CTAs per head; default 2).
#pragma once

#include <cstdint>
#include <span>

#include "common/kda_decode_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"

namespace kiln::jit {

struct KdaDecodeConfig {
    uint8_t v_split = 0;  // device: CTAs per (sequence, head), each 1/v_split of the columns (1, 2 or 4)
};

class KdaDecodeFamily final : public Family {
public:
    static constexpr std::string_view k_name = "kda_decode";
    using Config = KdaDecodeConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "KDA decode: one recurrent step per single-token sequence, fp32 state in place in the slot";
    }
    std::vector<std::string> modes() const override { return {"varlen"}; }
    std::string_view dims() const override { return "k (head dim)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(int head_dim, Target target, int v_split = 0);
};

// One CTA per (sequence, head, column part); sequences with more than one new token are skipped.
void launch_kda_decode(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaDecodeParams& p);

}  // namespace kiln::jit
