// Family `sample` (templates/device/sample.cuh, templates/host/sample.hpp, parameters and semantics
// templates/common/sample_params.h): one token per sequence from fp32 logits on the device: penalties
// (repetition, frequency, presence; packed token lists, the fed token included), temperature, top-k, top-p,
// min-p, a seeded Philox Gumbel-max draw (the same token for the same seed and step on both targets),
// greedy at temperature 0, the chosen token's log-softmax and the top logprobs, and a nonfinite flag. The
// results are one SampleOut per sequence (and the bare tokens, which the next step's embedding feed map
// reads). Vocab and batch are launch arguments.
#pragma once

#include <cstdint>

#include "common/sample_params.h"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

struct SampleConfig {
    uint16_t threads = 0;  // device CTA threads, one CTA per sequence (default 512)
};

class SampleFamily final : public Family {
public:
    static constexpr std::string_view k_name = "sample";
    static constexpr int k_max_top = KILN_SAMPLE_MAX_TOP;
    using Config = SampleConfig;

    std::string_view name() const override { return k_name; }
    std::string_view summary() const override {
        return "device sampler: penalties, temperature, top-k/top-p/min-p, seeded Gumbel-max, logprobs";
    }
    std::vector<std::string> modes() const override { return {"sample"}; }
    std::string_view dims() const override { return "none (vocab and batch are launch arguments)"; }
    std::span<const ConfigField> config_fields() const override;
    KernelDescriptor canonicalize(const KernelDescriptor& d) const override;
    DeviceSource device_source(const KernelDescriptor& d) const override;
    uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    bool has_host_source() const override { return true; }
    HostSource host_source(const KernelDescriptor& d) const override;

    static KernelDescriptor descriptor(Target target, int threads = 0);
};

struct SampleArgs {
    runtime::TensorView logits;          // f32 [S, >= vocab] (rows may be strided)
    int64_t vocab = 0;
    runtime::TensorView seqs;            // u8 [S, sizeof(SampleSeq)]: the per-sequence settings
    runtime::TensorView penalty_tokens;  // optional i32 [P]: the packed lists the settings point into
    runtime::TensorView prev_tokens;     // optional i32 [Q]: the previous step's tokens (feed_src)
    runtime::TensorView counts;          // u32 [S, vocab], zero (left zero); needed when a penalty is on
    runtime::TensorView out;             // u8 [S, sizeof(SampleOut)]
    runtime::TensorView tokens_out;      // i32 [S]
};

kiln_params::SampleParams sample_params(const LoadedKernel& k, const SampleArgs& a, runtime::Location where);
void launch_sample(const LoadedKernel& k, runtime::Stream& stream, const SampleArgs& a);

}  // namespace kiln::jit
