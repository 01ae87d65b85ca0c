#include "model/reference/forward.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "model/tensor_names.hpp"
#include "runtime/error.hpp"

namespace kiln::model::reference {

namespace {

Matrix load_matrix(const Checkpoint& ck, const std::string& name, size_t rows, size_t cols) {
    std::vector<float> v = to_fp32(ck.get(name));
    if (v.size() != rows * cols)
        throw CheckpointError(fmt::format("tensor '{}': {} values, expected [{}, {}]", name, v.size(), rows, cols));
    return Matrix(rows, cols, std::move(v));
}

std::vector<float> load_vector(const Checkpoint& ck, const std::string& name, size_t n) {
    std::vector<float> v = to_fp32(ck.get(name));
    if (v.size() != n) throw CheckpointError(fmt::format("tensor '{}': {} values, expected {}", name, v.size(), n));
    return v;
}

void rmsnorm_rows(Matrix& x, const std::vector<float>& w, float eps) {
    for (size_t t = 0; t < x.rows; ++t) rmsnorm(x.row(t), w.data(), x.cols, eps, x.row(t));
}

}  // namespace

KdaDims kda_dims(const ModelConfig& c) {
    KdaDims d;
    d.hidden = size_t(c.hidden_size);
    d.heads = size_t(c.kda.num_heads);
    d.head_dim = size_t(c.kda.head_dim);
    d.conv_kernel = size_t(c.kda.conv_size);
    d.gate_lower_bound = c.kda.gate_lower_bound;
    d.full_rank_gate = c.kda.use_full_rank_gate;
    d.norm_eps = c.rms_norm_eps;
    return d;
}

MlaDims mla_dims(const ModelConfig& c) {
    MlaDims d;
    d.hidden = size_t(c.hidden_size);
    d.heads = size_t(c.mla.num_heads);
    d.q_lora_rank = size_t(c.mla.q_lora_rank.value_or(0));
    d.kv_lora_rank = size_t(c.mla.kv_lora_rank);
    d.qk_nope = size_t(c.mla.qk_nope_head_dim);
    d.qk_rope = size_t(c.mla.qk_rope_head_dim);
    d.v_head = size_t(c.mla.v_head_dim);
    d.output_gate = c.mla.use_output_gate;
    d.norm_eps = c.mla_latent_norm_eps();
    return d;
}

GluActivation glu_activation(const ModelConfig& c) {
    return c.hidden_act == Activation::situ ? GluActivation::situ(c.situ_beta, c.situ_linear_beta) : GluActivation::silu();
}

LatentMoeDims moe_dims(const ModelConfig& c) {
    LatentMoeDims d;
    d.hidden = size_t(c.hidden_size);
    d.latent = size_t(c.moe.routed_expert_hidden_size.value_or(0));
    d.expert_inter = size_t(c.moe.moe_intermediate_size);
    d.shared_inter = size_t(c.moe.shared_intermediate_size());
    d.latent_norm = c.moe.latent_moe_use_norm;
    d.norm_eps = c.rms_norm_eps;
    d.router.num_experts = size_t(c.moe.num_experts);
    d.router.top_k = size_t(c.moe.top_k);
    d.router.renormalize = c.moe.router.renormalize;
    d.router.routed_scaling_factor = c.moe.router.routed_scaling_factor;
    d.act = glu_activation(c);
    return d;
}

size_t RequestState::bytes() const {
    size_t n = 0;
    for (const auto& k : kda_) {
        n += k.S.size() * sizeof(float);
        for (const auto& c : k.conv) n += c.data.size() * sizeof(float);
    }
    for (const auto& m : mla_) n += m.rows.size() * sizeof(float);
    return n;
}

ReferenceModel::ReferenceModel(const ModelConfig& config, const Checkpoint& ck)
    : config_(config), kda_dims_(kda_dims(config)), mla_dims_(mla_dims(config)), moe_dims_(moe_dims(config)),
      act_(glu_activation(config)) {
    if (config_.moe.router.num_expert_group != 1 || config_.moe.router.topk_group != 1)
        throw ConfigError(fmt::format("num_expert_group {} / topk_group {}: grouped top-k routing is not supported "
                                      "by the reference forward (Kimi models use 1 / 1)",
                                      config_.moe.router.num_expert_group, config_.moe.router.topk_group));
    validate_config(config_);
    ck.validate(config_);

    const TensorNames n(config_);
    const size_t d = size_t(config_.hidden_size), V = size_t(config_.vocab_size);
    embed_ = load_matrix(ck, n.embed_tokens(), V, d);
    lm_head_ = config_.tie_word_embeddings ? embed_ : load_matrix(ck, n.lm_head(), V, d);
    final_norm_ = load_vector(ck, n.final_norm(), d);
    const bool attn_res = config_.attn_res_block_size.has_value();
    if (attn_res) out_site_ = {load_vector(ck, n.output_res_proj(), d), load_vector(ck, n.output_res_norm(), d)};

    const KdaDims& kd = kda_dims_;
    const MlaDims& md = mla_dims_;
    const LatentMoeDims& ed = moe_dims_;
    for (int l = 0; l < config_.num_layers; ++l) {
        auto L = [&](std::string_view suffix) { return n.layer(l, suffix); };
        auto mat = [&](std::string_view suffix, size_t r, size_t c) { return load_matrix(ck, L(suffix), r, c); };
        auto vec = [&](std::string_view suffix, size_t len) { return load_vector(ck, L(suffix), len); };
        Layer layer;
        layer.kind = config_.layer_kinds.at(size_t(l));
        layer.input_norm = vec("input_layernorm.weight", d);
        layer.post_norm = vec("post_attention_layernorm.weight", d);
        if (attn_res) {
            layer.attn_site = {vec("self_attention_res_proj.weight", d), vec("self_attention_res_norm.weight", d)};
            layer.mlp_site = {vec("mlp_res_proj.weight", d), vec("mlp_res_norm.weight", d)};
        }
        if (layer.kind == LayerKind::kda) {
            const size_t W = kd.width(), K = kd.head_dim;
            KdaWeights& w = layer.kda;
            w.q_proj = mat("self_attn.q_proj.weight", W, d);
            w.k_proj = mat("self_attn.k_proj.weight", W, d);
            w.v_proj = mat("self_attn.v_proj.weight", W, d);
            w.q_conv = mat("self_attn.q_conv1d.weight", W, kd.conv_kernel);
            w.k_conv = mat("self_attn.k_conv1d.weight", W, kd.conv_kernel);
            w.v_conv = mat("self_attn.v_conv1d.weight", W, kd.conv_kernel);
            w.f_a = mat("self_attn.f_a_proj.weight", K, d);
            w.f_b = mat("self_attn.f_b_proj.weight", W, K);
            w.dt_bias = vec("self_attn.dt_bias", W);
            // Stored as [H], [1,1,H,1] or (K3) [head_dim]; the first H entries are the per-head values.
            w.A_log = to_fp32(ck.get(L("self_attn.A_log")));
            w.b_proj = mat("self_attn.b_proj.weight", kd.heads, d);
            if (kd.full_rank_gate) {
                w.g_proj = mat("self_attn.g_proj.weight", W, d);
            } else {
                w.g_a = mat("self_attn.g_a_proj.weight", K, d);
                w.g_b = mat("self_attn.g_b_proj.weight", W, K);
            }
            w.o_norm = vec("self_attn.o_norm.weight", K);
            w.o_proj = mat("self_attn.o_proj.weight", d, W);
            w.validate(kd);
        } else {
            MlaWeights& w = layer.mla;
            const size_t qo = md.heads * md.qk_head();
            if (md.q_lora_rank) {
                w.q_a = mat("self_attn.q_a_proj.weight", md.q_lora_rank, d);
                w.q_a_norm = vec("self_attn.q_a_layernorm.weight", md.q_lora_rank);
                w.q_b = mat("self_attn.q_b_proj.weight", qo, md.q_lora_rank);
            } else {
                w.q_proj = mat("self_attn.q_proj.weight", qo, d);
            }
            w.kv_a = mat("self_attn.kv_a_proj_with_mqa.weight", md.cache_width(), d);
            w.kv_a_norm = vec("self_attn.kv_a_layernorm.weight", md.kv_lora_rank);
            w.kv_b = mat("self_attn.kv_b_proj.weight", md.heads * (md.qk_nope + md.v_head), md.kv_lora_rank);
            if (md.output_gate) w.g_proj = mat("self_attn.g_proj.weight", md.heads * md.v_head, d);
            w.o_proj = mat("self_attn.o_proj.weight", d, md.heads * md.v_head);
            w.validate(md);
        }
        layer.moe = config_.is_moe(l);
        if (!layer.moe) {
            const size_t I = size_t(config_.intermediate_size);
            layer.dense = {load_matrix(ck, n.dense_mlp(l, "gate_proj"), I, d),
                           load_matrix(ck, n.dense_mlp(l, "up_proj"), I, d),
                           load_matrix(ck, n.dense_mlp(l, "down_proj"), d, I)};
            layer.dense.validate(d, I, "dense mlp");
        } else {
            LatentMoeWeights& w = layer.experts;
            w.router.gate = mat("block_sparse_moe.gate.weight", ed.router.num_experts, d);
            if (config_.moe.router.use_correction_bias)
                w.router.score_bias = vec("block_sparse_moe.gate.e_score_correction_bias", ed.router.num_experts);
            if (ed.latent) {
                w.down_proj = mat("block_sparse_moe.routed_expert_down_proj.weight", ed.latent, d);
                w.up_proj = mat("block_sparse_moe.routed_expert_up_proj.weight", d, ed.latent);
            }
            if (ed.latent_norm) w.latent_norm = vec("block_sparse_moe.routed_expert_norm.weight", ed.expert_in());
            const size_t I = ed.expert_inter, X = ed.expert_in();
            for (int e = 0; e < config_.moe.num_experts; ++e) {
                w.experts.push_back({Matrix(I, X, load_expert_fp32(ck, config_, l, e, ExpertProj::w1)),
                                     Matrix(I, X, load_expert_fp32(ck, config_, l, e, ExpertProj::w3)),
                                     Matrix(X, I, load_expert_fp32(ck, config_, l, e, ExpertProj::w2))});
            }
            if (ed.shared_inter)
                w.shared = {mat("block_sparse_moe.shared_experts.gate_proj.weight", ed.shared_inter, d),
                            mat("block_sparse_moe.shared_experts.up_proj.weight", ed.shared_inter, d),
                            mat("block_sparse_moe.shared_experts.down_proj.weight", d, ed.shared_inter)};
            w.validate(ed);
        }
        layers_.push_back(std::move(layer));
    }
}

RequestState ReferenceModel::new_request() const {
    RequestState s;
    for (const Layer& l : layers_) {
        s.kda_.push_back(l.kind == LayerKind::kda ? KdaState::zeros(kda_dims_) : KdaState{});
        s.mla_.push_back(l.kind == LayerKind::mla ? MlaCache::empty(mla_dims_) : MlaCache{});
    }
    return s;
}

Matrix ReferenceModel::forward(RequestState& state, std::span<const uint32_t> ids, const ForwardOptions& opts) const {
    const size_t T = ids.size(), d = size_t(config_.hidden_size), V = vocab_size();
    for (uint32_t id : ids)
        if (id >= V) throw InvalidArgument(fmt::format("token id {} is outside the vocabulary (size {})", id, V));
    if (state.kda_.size() != layers_.size() || state.mla_.size() != layers_.size())
        throw InvalidArgument("request state does not belong to this model");
    if (const int64_t ctx = config_.max_position_embeddings; ctx > 0 && int64_t(state.position_ + T) > ctx)
        throw InvalidArgument(fmt::format("{} token{} at position {} would run past the model's context of {} "
                                          "positions (max_position_embeddings)",
                                          T, T == 1 ? "" : "s", state.position_, ctx));
    if (T == 0) return Matrix(0, V);

    const KdaMode kda_mode = opts.kda.value_or(T > 1 ? KdaMode::chunked : KdaMode::recurrent);
    const MlaMode mla_mode = opts.mla.value_or(T > 1 ? MlaMode::plain : MlaMode::absorbed);
    const float eps = config_.rms_norm_eps;

    Matrix h(T, d);
    for (size_t t = 0; t < T; ++t) std::copy_n(embed_.row(ids[t]), d, h.row(t));
    std::optional<size_t> block = config_.attn_res_block_size ? std::optional<size_t>(size_t(*config_.attn_res_block_size))
                                                              : std::nullopt;
    ResidualStream stream(std::move(h), block, eps);

    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& layer = layers_[l];
        Matrix x = stream.mixer_input(l, layer.attn_site);
        rmsnorm_rows(x, layer.input_norm, eps);
        Matrix a = layer.kind == LayerKind::kda ? kda_forward(layer.kda, kda_dims_, state.kda_[l], x, kda_mode)
                                                : mla_forward(layer.mla, mla_dims_, state.mla_[l], x, mla_mode);
        x = stream.ffn_input(a, layer.mlp_site);
        rmsnorm_rows(x, layer.post_norm, eps);
        stream.add_ffn(layer.moe ? latent_moe_forward(layer.experts, moe_dims_, x) : glu_mlp(layer.dense, act_, x));
    }
    Matrix out = stream.output(out_site_);
    rmsnorm_rows(out, final_norm_, eps);
    state.position_ += T;
    return linear(lm_head_, out);
}

}  // namespace kiln::model::reference
