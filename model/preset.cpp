#include "model/preset.hpp"

#include <fmt/format.h>

namespace kiln::model {

namespace {

// K3's 3 KDA : 1 MLA pattern over n layers, with the last layer always MLA.
std::vector<LayerKind> k3_pattern(int n) {
    std::vector<LayerKind> kinds(size_t(n), LayerKind::kda);
    for (int l = 3; l < n; l += 4) kinds[size_t(l)] = LayerKind::mla;
    kinds[size_t(n - 1)] = LayerKind::mla;
    return kinds;
}

// Everything K3 fixes regardless of width.
ModelConfig k3_common() {
    ModelConfig c;
    c.model_type = "kimi_k3";
    c.layout = TensorLayout::k3;
    c.rms_norm_eps = 1e-5f;
    c.tie_word_embeddings = false;
    c.max_position_embeddings = 1048576;
    c.hidden_act = Activation::situ;
    c.situ_beta = 4.0f;
    c.situ_linear_beta = 25.0f;
    c.kda.conv_size = 4;
    c.kda.gate_lower_bound = -5.0f;
    c.kda.use_full_rank_gate = true;
    c.mla.use_nope = true;
    c.mla.use_output_gate = true;
    c.moe.latent_moe_use_norm = true;
    c.moe.first_k_dense_replace = 1;
    c.moe.router = RouterConfig{RouterActivation::sigmoid, true, true, 1.0f, 1, 1};
    c.expert_format = ExpertFormat::mxfp4_g32;
    return c;
}

}  // namespace

const std::vector<PresetInfo>& presets() {
    static const std::vector<PresetInfo> list = {
        {"k3-tiny", "K3 structure at tiny widths (9 layers, hidden 256, 16 experts); CPU-friendly"},
        {"k3-slice-tp8", "one GPU's share of K3 under TP8/EP8, 4 layers (12+12 heads, 112 experts)"},
        {"k3", "the published K3 text model (93 layers, hidden 7168, 896 experts)"},
    };
    return list;
}

ModelConfig preset_config(std::string_view name) {
    if (name == "k3-tiny") return k3_tiny_config();
    if (name == "k3-slice-tp8") return k3_slice_tp8_config();
    if (name == "k3") return k3_config();
    std::string known;
    for (const auto& p : presets()) known += fmt::format("{}{}", known.empty() ? "" : ", ", p.name);
    throw InvalidArgument(fmt::format("unknown preset '{}' (known: {})", name, known));
}

ModelConfig k3_tiny_config(ExpertFormat experts) {
    ModelConfig c = k3_common();
    c.hidden_size = 256;
    c.num_layers = 9;
    c.layer_kinds = k3_pattern(9);  // 1-based full_attn_layers [4, 8, 9]
    c.vocab_size = 4096;
    c.bos_token_id = 3840;          // [BOS]        (K3: 163584)
    c.eos_token_ids = {3842};       // <|end_of_msg|> (K3: 163586)
    c.pad_token_id = 4095;          // [PAD]        (K3: 163839)
    c.intermediate_size = 512;
    c.attn_res_block_size = 3;
    c.kda.num_heads = 4;
    c.kda.head_dim = 32;
    c.mla.num_heads = 4;
    c.mla.q_lora_rank = 64;
    c.mla.kv_lora_rank = 64;
    c.mla.qk_nope_head_dim = 32;
    c.mla.qk_rope_head_dim = 16;
    c.mla.v_head_dim = 32;
    c.moe.num_experts = 16;
    c.moe.top_k = 4;
    c.moe.num_shared_experts = 1;
    c.moe.moe_intermediate_size = 96;
    c.moe.routed_expert_hidden_size = 128;
    c.expert_format = experts;
    validate_config(c);
    return c;
}

ModelConfig k3_slice_tp8_config() {
    ModelConfig c = k3_common();
    c.hidden_size = 7168;
    c.num_layers = 4;
    c.layer_kinds = k3_pattern(4);   // KDA, KDA, KDA, MLA
    c.vocab_size = 163840 / 8;
    c.intermediate_size = 33792 / 8;
    c.attn_res_block_size = 12;
    c.kda.num_heads = 96 / 8;
    c.kda.head_dim = 128;
    c.mla.num_heads = 96 / 8;
    c.mla.q_lora_rank = 1536;
    c.mla.kv_lora_rank = 512;
    c.mla.qk_nope_head_dim = 128;
    c.mla.qk_rope_head_dim = 64;
    c.mla.v_head_dim = 128;
    c.moe.num_experts = 896 / 8;
    c.moe.top_k = 16;
    c.moe.num_shared_experts = 2;
    c.moe.moe_intermediate_size = 3072;
    c.moe.routed_expert_hidden_size = 3584;
    validate_config(c);
    return c;
}

ModelConfig k3_config() {
    ModelConfig c = k3_common();
    c.hidden_size = 7168;
    c.num_layers = 93;
    c.layer_kinds = k3_pattern(93);  // 1-based full_attn_layers [4, 8, ..., 92, 93]
    c.vocab_size = 163840;
    c.bos_token_id = 163584;
    c.eos_token_ids = {163586};
    c.pad_token_id = 163839;
    c.intermediate_size = 33792;
    c.attn_res_block_size = 12;
    c.kda.num_heads = 96;
    c.kda.head_dim = 128;
    c.mla.num_heads = 96;
    c.mla.q_lora_rank = 1536;
    c.mla.kv_lora_rank = 512;
    c.mla.qk_nope_head_dim = 128;
    c.mla.qk_rope_head_dim = 64;
    c.mla.v_head_dim = 128;
    c.moe.num_experts = 896;
    c.moe.top_k = 16;
    c.moe.num_shared_experts = 2;
    c.moe.moe_intermediate_size = 3072;
    c.moe.routed_expert_hidden_size = 3584;
    validate_config(c);
    return c;
}

}  // namespace kiln::model
