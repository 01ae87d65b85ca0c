// Random-weight checkpoints in the real layout and formats (`kiln make-model`).
//
// write_model() writes DIR/config.json (HF layout), safetensors shards model-0000i-of-0000n.safetensors and
// model.safetensors.index.json. Every tensor is drawn from its own generator seeded by (seed, tensor
// name), so the bytes depend only on the config and the seed, never on sharding or order: two runs with
// the same seed produce identical files. Shards are written temp-file-then-rename and config.json goes
// last, so a directory with a config.json is complete.
//
// Weight scales (chosen so activations stay O(1) through every layer and the SiTU caps are not hit):
//   projections (incl. routed experts, router, latent down/up, MLA, KDA q/k/v/o/g/b/f_a)  N(0, 1/√fan_in)
//   KDA f_b_proj                                    N(0, 0.2/√K): gate pre-activation z spread ≈ 0.2
//   KDA dt_bias      with gate_lower_bound: U[−1, 0] (exp(A)·z mostly in [−16, 0]: decays from ≈1 to e^-2.5)
//                    without: softplus⁻¹(U[0.001, 0.1]) (the usual Mamba/KDA init)
//   KDA A_log        log U[1, 16] in the first H entries, zero padding after (K3 stores max(H, head_dim))
//   depthwise convs  N(0, 1/√kernel)
//   RMSNorm weights  U[0.9, 1.1]
//   embed_tokens     N(0, 1);  lm_head N(0, 1/√d)
//   AttnRes pseudo-queries [1, d]   N(0, 0.5/√d): scores ~N(0, 0.5²), softmax neither uniform nor one-hot
//   e_score_correction_bias         N(0, 0.02²)
// Unit-RMS inputs (every sublayer reads an RMS-normed x) then give O(1) projections, gate pre-activations
// with |gate| ≲ 4 rarely exceeded (SiTU β = 4) and up branches far below 25.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/tensor_names.hpp"

namespace kiln::model {

inline constexpr uint64_t kDefaultModelSeed = 1;

struct MakeModelOptions {
    uint64_t seed = kDefaultModelSeed;
    uint64_t max_shard_bytes = 64ull << 20;  // a new shard starts before a tensor would cross this
    bool replace = false;                    // allow DIR to already hold a checkpoint (stale shards removed)
};

struct MakeModelResult {
    size_t tensors = 0;
    uint64_t tensor_bytes = 0;
    std::vector<std::string> shards;
};

MakeModelResult write_model(const ModelConfig& c, const std::filesystem::path& dir, const MakeModelOptions& opts = {});

// Writes DIR/config.json alone (shape studies of presets too large to write). Throws InvalidArgument
// when DIR already holds a config.json, unless `replace`.
void write_model_config(const ModelConfig& c, const std::filesystem::path& dir, bool replace);

// The fp32 values make-model draws for one logical tensor, before rounding to its stored dtype or
// quantising (tests compare a loaded checkpoint against these).
std::vector<float> random_weights(const ModelConfig& c, const LogicalTensor& t, uint64_t seed = kDefaultModelSeed);

}  // namespace kiln::model
