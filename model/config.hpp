// The model configuration: every field of a Hugging Face config.json that the K3 forward pass uses.
//
// Accepted inputs:
//   - Kimi K3: top-level `model_type: "kimi_k3"` with the decoder in a nested `text_config`
//     (`model_type: "kimi_linear"`); quantization_config (top level or in text_config) compressed-tensors
//     `mxfp4-pack-quantized` (or `pack-quantized` INT4) for the routed experts, absent for bf16 experts.
//     Tensor layout: `language_model.model.…` with `language_model.lm_head` beside `model.`.
//   - Kimi-Linear-48B: `model_type: "kimi_linear"` at the top level. Tensor layout `model.…`, `lm_head`.
//   - Either decoder config as Moonshot writes it (ConfigDialect::moonshot) or as Hugging Face transformers
//     5.x's KimiLinearConfig saves it (ConfigDialect::transformers, chosen by the presence of
//     `layer_types` / `mlp_layer_types`): per-layer `layer_types` ("linear_attention" = KDA,
//     "full_attention" = MLA) instead of (or beside, then agreeing with) linear_attn_config's lists, KDA
//     dims as `linear_num_heads` / `linear_head_dim` / `linear_conv_kernel_dim`, `mlp_layer_types`
//     ("dense" / "sparse") or first_k_dense_replace defaulting to 1, NoPE MLA whatever `mla_use_nope`
//     says, `model_max_length` for max_position_embeddings, attn_res_block_size 0 for none, and the
//     transformers spellings n_group, n_shared_experts, num_experts_per_tok, num_local_experts and
//     norm_topk_prob accepted for their Moonshot names. Its save_pretrained writes the dense MLP under
//     `block_sparse_moe.{gate,up,down}_proj` (tensor_names.hpp).
// Layer lists in `linear_attn_config` are 1-based in the file; ModelConfig::layer_kinds is 0-based.
// Unknown model types, unsupported values (e.g. RoPE MLA, a softmax router) and inconsistent fields are
// refused with a ConfigError naming the field (`text_config.linear_attn_config.kda_layers: ...`). Every
// numeric field is range-checked before it is narrowed (list elements named `kda_layers[3]`); floats must
// be finite in fp32; token ids lie in [0, vocab_size); max_position_embeddings, when given, is at least 2.
// Keys of the decoder config kiln does not know are logged as a warning, or refused with
// ParseOptions::strict; the K3 wrapper's own keys (vision_config, media ids, ...) are not inspected.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/expert_format.hpp"
#include "runtime/error.hpp"

namespace kiln::model {

class ConfigError : public InvalidArgument {
public:
    using InvalidArgument::InvalidArgument;
};

enum class LayerKind : uint8_t { kda, mla };
enum class Activation : uint8_t { silu, situ };
enum class RouterActivation : uint8_t { sigmoid };
// Where the tensors live: K3 (`language_model.model.`) or Kimi-Linear (`model.`).
enum class TensorLayout : uint8_t { k3, kimi_linear };
// Who wrote config.json (and named the dense MLP tensors): Moonshot or transformers 5.x (see above).
enum class ConfigDialect : uint8_t { moonshot, transformers };

struct KdaConfig {
    int num_heads = 0;                       // H
    int head_dim = 0;                        // K = V
    int conv_size = 4;                       // short_conv_kernel_size
    std::optional<float> gate_lower_bound;   // set: g = lb·sigmoid(exp(A_log[h])·z); unset: −exp(A_log[h])·softplus(z)
    bool use_full_rank_gate = false;         // true: g_proj [H·K, d]; false: g_a_proj [K, d] + g_b_proj [H·K, K]
    int64_t inner_dim() const { return int64_t(num_heads) * head_dim; }  // H·K
};

struct MlaConfig {
    int num_heads = 0;                       // num_attention_heads (= num_key_value_heads)
    std::optional<int> q_lora_rank;          // nullopt: plain q_proj
    int kv_lora_rank = 0;                    // d_c
    int qk_nope_head_dim = 0;                // d_n
    int qk_rope_head_dim = 0;                // d_r (computed and concatenated, never rotated: NoPE)
    int v_head_dim = 0;                      // d_v
    bool use_nope = true;                    // always true (RoPE MLA is refused)
    bool use_output_gate = false;            // g_proj [n_h·d_v, d], attn ⊙ sigmoid(g_proj(x))
    int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    int cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // values per token in the latent cache
};

struct RouterConfig {
    RouterActivation activation = RouterActivation::sigmoid;
    bool use_correction_bias = true;         // gate.e_score_correction_bias present; used for selection only
    bool renormalize = true;                 // moe_renormalize
    float routed_scaling_factor = 1.0f;
    int num_expert_group = 1;                // grouped top-k (1 = plain top-k)
    int topk_group = 1;
};

struct MoeConfig {
    int num_experts = 0;
    int top_k = 0;                           // num_experts_per_token
    int num_shared_experts = 0;              // fused into one MLP of width num_shared_experts·moe_intermediate_size
    int moe_intermediate_size = 0;
    std::optional<int> routed_expert_hidden_size;  // latent width ℓ; nullopt: experts read the hidden state
    bool latent_moe_use_norm = false;        // RMSNorm on the aggregated latent (needs the latent)
    int first_k_dense_replace = 0;           // layers [0, this) use the dense MLP
    RouterConfig router;
    int64_t shared_intermediate_size() const { return int64_t(num_shared_experts) * moe_intermediate_size; }
};

struct ModelConfig {
    std::string model_type;                  // "kimi_k3" or "kimi_linear" (top level)
    TensorLayout layout = TensorLayout::k3;
    ConfigDialect dialect = ConfigDialect::moonshot;
    int hidden_size = 0;                     // d
    int num_layers = 0;
    int vocab_size = 0;
    int intermediate_size = 0;               // dense MLP width (layers < first_k_dense_replace)
    float rms_norm_eps = 1e-5f;
    bool tie_word_embeddings = false;        // true: no lm_head tensor, logits use embed_tokens
    int64_t max_position_embeddings = 0;     // 0 when the config does not say
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;      // eos_token_id, an int or a list
    std::optional<int64_t> pad_token_id;

    Activation hidden_act = Activation::silu;
    float situ_beta = 4.0f;                  // activation_situ_beta (gate branch cap)
    std::optional<float> situ_linear_beta = 25.0f;  // activation_situ_linear_beta; nullopt: up branch uncapped

    std::optional<int> attn_res_block_size;  // Attention Residuals; nullopt: plain residual stream

    KdaConfig kda;
    MlaConfig mla;
    MoeConfig moe;
    ExpertFormat expert_format = ExpertFormat::bf16;

    std::vector<LayerKind> layer_kinds;      // per 0-based layer

    bool is_kda(int layer) const { return layer_kinds.at(size_t(layer)) == LayerKind::kda; }
    bool is_mla(int layer) const { return layer_kinds.at(size_t(layer)) == LayerKind::mla; }
    bool is_moe(int layer) const { return layer >= moe.first_k_dense_replace; }
    int num_kda_layers() const;
    int num_mla_layers() const;
    // Input width of a routed expert: the latent width if present, else hidden_size.
    int expert_in_dim() const { return moe.routed_expert_hidden_size.value_or(hidden_size); }
    // eps of the MLA q_a_layernorm and kv_a_layernorm: Kimi-Linear's code (Moonshot's and transformers')
    // builds them with the RMSNorm default 1e-6; K3 uses rms_norm_eps.
    float mla_latent_norm_eps() const { return layout == TensorLayout::kimi_linear ? 1e-6f : rms_norm_eps; }
};

struct ParseOptions {
    bool strict = false;  // refuse unknown keys instead of warning about them
    bool quiet = false;   // no warning for unknown keys (a second reader of a file already parsed)
};

ModelConfig parse_config(const nlohmann::json& j, const ParseOptions& opts = {});
// Reads DIR/config.json (or a path to a .json file). Errors name the file and the field.
ModelConfig load_config(const std::filesystem::path& dir_or_file, const ParseOptions& opts = {});

// The Hugging Face layout for `c`: a kimi_k3 wrapper with text_config for TensorLayout::k3, a flat
// kimi_linear config otherwise, in c.dialect; quantization_config for the packed expert formats.
// parse_config(to_json(c)) reproduces c.
nlohmann::json to_json(const ModelConfig& c);

// Re-checks the consistency rules parse_config applies (for configs built in code, e.g. presets).
void validate_config(const ModelConfig& c);

std::string_view layer_kind_name(LayerKind k);

}  // namespace kiln::model
