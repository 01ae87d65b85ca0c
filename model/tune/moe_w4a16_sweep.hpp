// The moe_w4a16 layer's sweep for `kiln tune`: per MoE shape of a model, every candidate configuration of
// the layer (autotune/heuristics/moe_w4a16.hpp names its fields) timed at a ladder of tokens per call, on
// the backend tuning runs on. A candidate pins one path and its knobs:
//   host    decode (tiles 1 / 2 / 4), decode_rows (tiles 1 / 2 / 4), prefill (block_m 64)
//   device  decode and decode_rows on the static and dynamic schedules (tiles 1 / 2 / 4), the fused
//           persistent kernel (tiles x k-groups 1 / 2 / 4 x stage width 128 / 256 x ring depth auto / 4), and
//           the prefill GEMMs (mma.sync 64, wgmma 64 / 64 wide / 128 / 192)
// A candidate whose plan at that size takes another path (the fused kernel's shared-memory limit, say) is
// not measured there. Weights are random bytes in the decode layout, rotated over enough copies to exceed
// the SKU's last-level cache; routing is uniform over E x ep_size experts, the rank's own ones kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autotune/sku.hpp"
#include "autotune/sweep.hpp"
#include "jit/dispatcher.hpp"
#include "jit/families/moe_w4a16_common.hpp"
#include "model/config.hpp"
#include "runtime/backend.hpp"

namespace kiln::model::tune {

// One routed-expert layer shape of a model, as the moe_w4a16 layer runs it.
struct MoeLayerShape {
    int hidden = 0;        // the experts' input width (the latent width when there is one)
    int intermediate = 0;  // moe_intermediate_size
    int experts = 0;       // local experts
    int topk = 0;
    jit::WeightFormat format = jit::WeightFormat::none;
    jit::moe::Activation act = jit::moe::Activation::silu_glu;
    int ep_size = 1;

    autotune::ShapeKey key() const;
};

// The distinct moe_w4a16 shapes of `config` (none for bf16 experts); ep_size >= 1.
std::vector<MoeLayerShape> moe_layer_shapes(const ModelConfig& config, int ep_size);

// The candidates for a target (host or device), in a fixed order.
std::vector<autotune::SweepCandidate> moe_w4a16_candidates(jit::Target target);
// Tokens per call measured: powers of two up to max_tokens (device: and the midpoints 3 x 2^i from 48),
// max_tokens itself last.
std::vector<int64_t> moe_w4a16_sweep_sizes(int max_tokens, bool device);

struct MoeSweepOptions {
    int max_tokens = 256;             // the largest call measured
    uint64_t weight_budget_bytes = 0;  // memory for the weight copies; 0: a quarter of the SKU's memory, at most 16 GiB
    uint64_t seed = 1;
};

// The sweep case of one shape on `backend` (the dispatcher compiles the candidates' kernels on first use;
// weights are allocated at the first point and live as long as the case).
autotune::SweepCase moe_w4a16_sweep_case(jit::Dispatcher& disp, runtime::Backend& backend, const MoeLayerShape& shape,
                                         const autotune::SkuIdentity& sku, const MoeSweepOptions& options);

// The families `kiln tune --families` accepts, and the cases of `families` ("" or empty: all) for a model.
// Throws InvalidArgument naming an unknown family and the known ones, or when the model has nothing to tune.
std::vector<std::string> tunable_families();
std::vector<autotune::SweepCase> model_sweep_cases(const ModelConfig& config, const std::vector<std::string>& families,
                                                   jit::Dispatcher& disp, runtime::Backend& backend,
                                                   const autotune::SkuIdentity& sku, const MoeSweepOptions& options,
                                                   int ep_size);

}  // namespace kiln::model::tune
