// The routed-expert layer (family moe_w4a16) on the host target: the launches of jit/moe_w4a16.hpp —
// routing prep, gate_up with the GLU, down combined per token or in rows mode + combine, or the prefill
// configuration (m-blocks of 64 rows) — enqueued on a HostStream over host memory, so serving code runs
// the same layer with or without a GPU. The configuration of a call follows the device layer's rules
// (rows from `rows_combine_min` routed slots, prefill from `prefill_min` slots per expert) unless forced.
// Only present when kiln is built with host_jit (KILN_HAVE_HOST_JIT).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "jit/family_moe_w4a16.hpp"
#include "jit/host_kernel_loader.hpp"
#include "jit/moe_w4a16_weights.hpp"
#include "runtime/host_executor.hpp"

namespace kiln::jit {

enum class MoeW4A16HostConfig : uint8_t { decode_combined, decode_rows, prefill };

struct MoeW4A16HostOptions {
    MoeActivation act = MoeActivation::silu_glu;
    int topk = 8;
    int max_tokens = 1;              // workspace capacity: tokens per forward
    int tiles = 0;                   // decode m-blocks: token tiles of 8 (1, 2, 4); 0 = MoeW4A16::choose_tiles
    int64_t rows_combine_min = 256;  // routed slots from which down writes rows + combine; -1 never
    int64_t prefill_min = 128;       // routed slots per expert from which the prefill configuration runs; -1 never
    std::optional<MoeW4A16HostConfig> force;  // run every call in this configuration
};

class MoeW4A16HostLayer {
public:
    // `gate_up` and `down` must stay alive and unchanged while the layer is used (their bytes are read).
    // Throws InvalidArgument for mismatched shapes, formats or layouts.
    MoeW4A16HostLayer(HostKernelLoader& loader, const moe::PreparedMoeWeights& gate_up,
                      const moe::PreparedMoeWeights& down, const MoeW4A16HostOptions& opt);

    // x bf16 [tokens, hidden], ids i32 / weights f32 [tokens, topk] (-1: an expert of another rank),
    // out bf16 [tokens, hidden]; tokens <= max_tokens. The buffers must stay valid until the stream has
    // run the work.
    void forward(const uint16_t* x, const int32_t* ids, const float* weights, int tokens, uint16_t* out,
                 runtime::HostStream& stream);

    MoeW4A16HostConfig config_for(int tokens) const;
    MoeW4A16HostConfig last_config() const { return last_; }
    // The fp32 accumulator of the combined down path: all zero between calls.
    std::span<const float> accumulator() const { return acc_; }

private:
    struct Kernels {
        const LoadedKernel *routing = nullptr, *gate_up = nullptr, *down = nullptr;
        int block_m = 0, cap = 0;
    };
    const Kernels& kernels(MoeW4A16HostConfig c);

    HostKernelLoader& loader_;
    const moe::PreparedMoeWeights& gu_;
    const moe::PreparedMoeWeights& dn_;
    MoeW4A16HostOptions opt_;
    int tiles_ = 1;
    Kernels k_[3];
    const LoadedKernel* combine_ = nullptr;
    MoeW4A16HostConfig last_ = MoeW4A16HostConfig::decode_combined;
    std::vector<int32_t> counts_, nmb_, info_, sorted_token_, counters_, slot_pos_;
    std::vector<float> sorted_weight_, acc_;
    std::vector<uint16_t> inter_, rows_;
};

}  // namespace kiln::jit
