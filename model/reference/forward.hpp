// The reference K3 forward pass with incremental per-request state (k3-model.md §1–§6, §4.2 stream).
//
// ReferenceModel converts every weight of a checkpoint to fp32 once (routed experts are dequantised from
// bf16 / INT4 / MXFP4 with the checkpoint's own decoders) and then runs
//   h = embed(ids);  for each layer: mixer (KDA or MLA) and FFN (dense GLU MLP or LatentMoE), with pre-norms,
//   joined by Attention Residuals (or the plain residual);  logits = lm_head(RMSNorm(h)).
// RequestState holds what a request carries between calls: per KDA layer the conv state (last 3 projected
// inputs) and the fp32 K×V recurrent state, per MLA layer the (kv_lora + qk_rope)-value latent cache.
// forward(state, ids) consumes any number of new tokens and returns the logits of each of them, so a
// prompt prefilled in one call, in chunks of any size, or token by token gives the same logits up to fp32
// rounding. By default a call with several tokens uses the chunked KDA and the plain MLA form, a call with
// one token the recurrent KDA and the absorbed MLA form (what a serving engine does); ForwardOptions can
// pin either. Token ids are checked before any state changes. forward() is const: requests with distinct
// states may run concurrently on one model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/config.hpp"
#include "model/reference/attn_res.hpp"
#include "model/reference/kda.hpp"
#include "model/reference/latent_moe.hpp"
#include "model/reference/mla.hpp"
#include "model/reference/tensor_ops.hpp"

namespace kiln::model::reference {

struct ForwardOptions {
    std::optional<KdaMode> kda;  // unset: chunked for several tokens, recurrent for one
    std::optional<MlaMode> mla;  // unset: plain for several tokens, absorbed for one
};

// Mixer and FFN dims of one model, derived from its config.
KdaDims kda_dims(const ModelConfig& c);
MlaDims mla_dims(const ModelConfig& c);
LatentMoeDims moe_dims(const ModelConfig& c);
GluActivation glu_activation(const ModelConfig& c);

class RequestState {
public:
    // Tokens consumed so far.
    size_t position() const { return position_; }
    // Bytes of state held (KDA conv + recurrent, MLA caches).
    size_t bytes() const;

    // For executors that keep the state elsewhere between calls (model/forward/reference_executor): the
    // parts of model layer `layer` (its KDA state, or its MLA cache), and the position they stand at.
    KdaState& kda(size_t layer) { return kda_.at(layer); }
    MlaCache& mla(size_t layer) { return mla_.at(layer); }
    void set_position(size_t position) { position_ = position; }

private:
    friend class ReferenceModel;
    size_t position_ = 0;
    std::vector<KdaState> kda_;   // indexed by layer (empty for MLA layers)
    std::vector<MlaCache> mla_;   // indexed by layer (width 0 for KDA layers)
};

class ReferenceModel {
public:
    // Validates the checkpoint against the config, then loads it; throws CheckpointError / ConfigError.
    ReferenceModel(const ModelConfig& config, const Checkpoint& checkpoint);

    const ModelConfig& config() const { return config_; }
    size_t vocab_size() const { return size_t(config_.vocab_size); }

    RequestState new_request() const;

    // Logits [ids.size(), vocab] for the new tokens; advances `state`. Throws InvalidArgument (state
    // untouched) for an id outside the vocabulary or tokens past max_position_embeddings (when set).
    Matrix forward(RequestState& state, std::span<const uint32_t> ids, const ForwardOptions& opts = {}) const;

private:
    struct Layer {
        LayerKind kind = LayerKind::kda;
        std::vector<float> input_norm, post_norm;
        AttnResSite attn_site, mlp_site;
        KdaWeights kda;
        MlaWeights mla;
        bool moe = false;
        MlpWeights dense;
        LatentMoeWeights experts;
    };

    ModelConfig config_;
    KdaDims kda_dims_;
    MlaDims mla_dims_;
    LatentMoeDims moe_dims_;
    GluActivation act_;
    Matrix embed_, lm_head_;
    std::vector<float> final_norm_;
    AttnResSite out_site_;
    std::vector<Layer> layers_;
};

}  // namespace kiln::model::reference
