// Built-in model shapes (ARCHITECTURE.md §7).
//   k3-tiny       K3's structure at CPU-friendly widths: 9 layers, 3 KDA : 1 MLA with the last layer MLA
//                 (1-based full_attn_layers [4, 8, 9]), layer 0 dense, hidden 256, KDA 4×32, MLA 4 heads
//                 (q_lora 64, kv_lora 64, 32/16/32), 16 experts top-4 + 1 shared, latent 128,
//                 moe_intermediate 96, dense 512, AttnRes blocks of 3, vocab 4096 (the tiny tokenizer's:
//                 special ids 3840 + i mirror K3's 163584 + i), gate_lower_bound −5, SiTU, MXFP4 experts.
//   k3-slice-tp8  One GPU's share of K3 under TP8 / EP8 for 4 layers (3 KDA + 1 MLA, layer 0 dense):
//                 12 KDA heads, 12 MLA heads, 112 of 896 experts (top-16), a 1/8 vocab and dense MLP.
//                 The fused shared expert (2 × 3072) is kept whole: the config cannot express 1/8 of it.
//   k3            The published K3 text model (93 layers, hidden 7168, 896 experts top-16, latent 3584).
// Presets are configs only; make_model.hpp writes weights for them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"

namespace kiln::model {

struct PresetInfo {
    std::string_view name;
    std::string_view summary;
};

const std::vector<PresetInfo>& presets();
// Throws InvalidArgument listing the known names for an unknown one.
ModelConfig preset_config(std::string_view name);

ModelConfig k3_tiny_config(ExpertFormat experts = ExpertFormat::mxfp4_g32);
ModelConfig k3_slice_tp8_config();
ModelConfig k3_config();

}  // namespace kiln::model
