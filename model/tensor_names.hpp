// The tensors a config implies: names (real K3 / Kimi-Linear layout), dtypes and shapes. The loader,
// the validator and make-model all use these lists, so a name is spelled in exactly one place.
//
// K3 layout (TensorLayout::k3):  language_model.model.{embed_tokens,norm,output_attn_res_{proj,norm}},
//   language_model.lm_head.weight (beside model., not under it), and per layer l
//   language_model.model.layers.{l}.{input_layernorm, post_attention_layernorm,
//   self_attention_res_{proj,norm}, mlp_res_{proj,norm}, self_attn.*, mlp.* (dense),
//   block_sparse_moe.{gate, routed_expert_{down,up}_proj, routed_expert_norm, shared_experts.*,
//   experts.{e}.{w1,w3,w2}}}. Kimi-Linear layout: the same under model. with lm_head.weight.
// The dense MLP is `mlp.{gate,up,down}_proj` in Moonshot's checkpoints and `block_sparse_moe.{gate,up,down}_proj`
// in those transformers 5.x saves (ConfigDialect::transformers: it renames every layer's mlp back to
// block_sparse_moe).
// Routed experts (w1 = gate, w3 = up, w2 = down) are stored as `.weight` (bf16) or
// `.weight_packed` + `.weight_scale` (+ `.weight_shape` for INT4), see expert_format.hpp.
// Tensors outside the text model (vision_tower.*, mm_projector.* beside language_model.) are not listed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"
#include "model/dtype.hpp"

namespace kiln::model {

// What a tensor is, for initialisation (make-model) and for readers that walk the list.
enum class TensorRole : uint8_t {
    embedding,     // embed_tokens [V, d]
    lm_head,       // [V, d]
    norm,          // an RMSNorm weight [n]
    linear,        // a projection [out, in]
    conv,          // depthwise causal conv [C, 1, k]
    a_log,         // KDA A_log (fp32), per head in the first H entries
    dt_bias,       // KDA dt_bias [H·K] (fp32)
    router,        // block_sparse_moe.gate.weight [E, d]
    router_bias,   // gate.e_score_correction_bias [E] (fp32)
    res_query,     // an AttnRes pseudo-query [1, d]
    expert,        // a routed expert matrix [out, in], stored per ExpertFormat
};

enum class ExpertProj : uint8_t { w1, w3, w2 };  // gate, up, down
std::string_view expert_proj_name(ExpertProj p);

// One logical weight. For experts `name` is the base (…experts.{e}.w1) without the storage suffix.
struct LogicalTensor {
    std::string name;
    TensorRole role;
    std::vector<int64_t> shape;  // logical shape (experts: [out, in] before packing)
    DType dtype;                 // stored dtype (experts: bf16 when unquantised)
    int layer = -1;              // -1: model level
    int expert = -1;
    ExpertProj proj = ExpertProj::w1;
    int64_t fan_in() const { return shape.empty() ? 1 : shape.back(); }
    int64_t numel() const;
};

// A stored tensor as a checkpoint must hold it.
struct TensorSpec {
    std::string name;
    DType dtype;                                   // what make-model writes and the K3 checkpoint uses
    std::vector<int64_t> shape;
    std::vector<DType> accepted_dtypes;            // dtype plus equivalents a loader accepts (e.g. F16 for BF16)
    std::vector<std::vector<int64_t>> accepted_shapes;  // shape plus alternatives (A_log: [H], [1,1,H,1], ...)
    size_t logical = 0;                            // index into logical_tensors(c)
    std::vector<int64_t> logical_shape;            // the logical tensor's shape ([out, in] for experts)
    enum class Part : uint8_t { whole, packed, scale, shape_info } part = Part::whole;

    bool accepts(DType t) const;
    bool accepts(std::span<const int64_t> s) const;
    size_t nbytes() const;
};

// Builds names for one layout.
class TensorNames {
public:
    explicit TensorNames(TensorLayout layout, ConfigDialect dialect = ConfigDialect::moonshot);
    explicit TensorNames(const ModelConfig& c) : TensorNames(c.layout, c.dialect) {}

    std::string embed_tokens() const { return model_ + "embed_tokens.weight"; }
    std::string final_norm() const { return model_ + "norm.weight"; }
    std::string lm_head() const { return lm_head_; }
    std::string output_res_proj() const { return model_ + "output_attn_res_proj.weight"; }
    std::string output_res_norm() const { return model_ + "output_attn_res_norm.weight"; }
    // `…model.layers.{l}.` + suffix, e.g. layer(3, "self_attn.q_proj.weight").
    std::string layer(int l, std::string_view suffix) const;
    // The dense MLP's `proj` (gate_proj, up_proj, down_proj) weight of layer l, as the dialect names it.
    std::string dense_mlp(int l, std::string_view proj) const;
    // `…layers.{l}.block_sparse_moe.experts.{e}.{w1|w3|w2}` (append .weight / .weight_packed / ...).
    std::string expert(int l, int e, ExpertProj p) const;
    // True for names kiln does not load in this layout (vision tower, projector).
    bool outside_text_model(std::string_view name) const;

private:
    TensorLayout layout_;
    ConfigDialect dialect_;
    std::string model_;    // "language_model.model." or "model."
    std::string lm_head_;  // "language_model.lm_head.weight" or "lm_head.weight"
};

std::vector<LogicalTensor> logical_tensors(const ModelConfig& c);
// Every stored tensor, in logical order (experts expanded into their stored parts per c.expert_format).
std::vector<TensorSpec> expected_tensors(const ModelConfig& c);
// Total bytes of expected_tensors(c).
uint64_t expected_bytes(const ModelConfig& c);

}  // namespace kiln::model
