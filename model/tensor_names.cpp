#include "model/tensor_names.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::model {

std::string_view expert_proj_name(ExpertProj p) {
    switch (p) {
        case ExpertProj::w1: return "w1";
        case ExpertProj::w3: return "w3";
        case ExpertProj::w2: return "w2";
    }
    return "?";
}

int64_t LogicalTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

bool TensorSpec::accepts(DType t) const {
    return std::find(accepted_dtypes.begin(), accepted_dtypes.end(), t) != accepted_dtypes.end();
}

bool TensorSpec::accepts(std::span<const int64_t> s) const {
    for (const auto& a : accepted_shapes)
        if (std::equal(a.begin(), a.end(), s.begin(), s.end())) return true;
    return false;
}

size_t TensorSpec::nbytes() const {
    size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= size_t(d);
    return n;
}

TensorNames::TensorNames(TensorLayout layout, ConfigDialect dialect) : layout_(layout), dialect_(dialect) {
    if (layout == TensorLayout::k3) {
        model_ = "language_model.model.";
        lm_head_ = "language_model.lm_head.weight";
    } else {
        model_ = "model.";
        lm_head_ = "lm_head.weight";
    }
}

std::string TensorNames::layer(int l, std::string_view suffix) const {
    return fmt::format("{}layers.{}.{}", model_, l, suffix);
}

std::string TensorNames::dense_mlp(int l, std::string_view proj) const {
    return fmt::format("{}layers.{}.{}.{}.weight", model_, l,
                       dialect_ == ConfigDialect::transformers ? "block_sparse_moe" : "mlp", proj);
}

std::string TensorNames::expert(int l, int e, ExpertProj p) const {
    return fmt::format("{}layers.{}.block_sparse_moe.experts.{}.{}", model_, l, e, expert_proj_name(p));
}

bool TensorNames::outside_text_model(std::string_view name) const {
    if (layout_ == TensorLayout::k3) return !name.starts_with("language_model.");
    return name.starts_with("vision_tower.") || name.starts_with("mm_projector.");
}

std::vector<LogicalTensor> logical_tensors(const ModelConfig& c) {
    const TensorNames n(c);
    const int64_t d = c.hidden_size;
    std::vector<LogicalTensor> out;
    auto add = [&](std::string name, TensorRole role, std::vector<int64_t> shape, int layer = -1,
                   DType dtype = DType::bf16) {
        out.push_back(LogicalTensor{std::move(name), role, std::move(shape), dtype, layer});
    };
    const bool attn_res = c.attn_res_block_size.has_value();

    add(n.embed_tokens(), TensorRole::embedding, {c.vocab_size, d});
    for (int l = 0; l < c.num_layers; ++l) {
        add(n.layer(l, "input_layernorm.weight"), TensorRole::norm, {d}, l);
        add(n.layer(l, "post_attention_layernorm.weight"), TensorRole::norm, {d}, l);
        if (attn_res) {
            add(n.layer(l, "self_attention_res_proj.weight"), TensorRole::res_query, {1, d}, l);
            add(n.layer(l, "self_attention_res_norm.weight"), TensorRole::norm, {d}, l);
            add(n.layer(l, "mlp_res_proj.weight"), TensorRole::res_query, {1, d}, l);
            add(n.layer(l, "mlp_res_norm.weight"), TensorRole::norm, {d}, l);
        }
        if (c.is_kda(l)) {
            const auto& k = c.kda;
            const int64_t hk = k.inner_dim(), K = k.head_dim, H = k.num_heads;
            for (const char* p : {"q_proj", "k_proj", "v_proj"})
                add(n.layer(l, fmt::format("self_attn.{}.weight", p)), TensorRole::linear, {hk, d}, l);
            for (const char* p : {"q_conv1d", "k_conv1d", "v_conv1d"})
                add(n.layer(l, fmt::format("self_attn.{}.weight", p)), TensorRole::conv, {hk, 1, k.conv_size}, l);
            add(n.layer(l, "self_attn.f_a_proj.weight"), TensorRole::linear, {K, d}, l);
            add(n.layer(l, "self_attn.f_b_proj.weight"), TensorRole::linear, {hk, K}, l);
            add(n.layer(l, "self_attn.dt_bias"), TensorRole::dt_bias, {hk}, l, DType::f32);
            std::vector<int64_t> a_shape = c.layout == TensorLayout::k3 ? std::vector<int64_t>{std::max(H, K)}
                                                                         : std::vector<int64_t>{1, 1, H, 1};
            add(n.layer(l, "self_attn.A_log"), TensorRole::a_log, a_shape, l, DType::f32);
            add(n.layer(l, "self_attn.b_proj.weight"), TensorRole::linear, {H, d}, l);
            if (k.use_full_rank_gate) {
                add(n.layer(l, "self_attn.g_proj.weight"), TensorRole::linear, {hk, d}, l);
            } else {
                add(n.layer(l, "self_attn.g_a_proj.weight"), TensorRole::linear, {K, d}, l);
                add(n.layer(l, "self_attn.g_b_proj.weight"), TensorRole::linear, {hk, K}, l);
            }
            add(n.layer(l, "self_attn.o_norm.weight"), TensorRole::norm, {K}, l);
            add(n.layer(l, "self_attn.o_proj.weight"), TensorRole::linear, {d, hk}, l);
        } else {
            const auto& m = c.mla;
            const int64_t nh = m.num_heads, qk = m.qk_head_dim();
            if (m.q_lora_rank) {
                add(n.layer(l, "self_attn.q_a_proj.weight"), TensorRole::linear, {*m.q_lora_rank, d}, l);
                add(n.layer(l, "self_attn.q_a_layernorm.weight"), TensorRole::norm, {*m.q_lora_rank}, l);
                add(n.layer(l, "self_attn.q_b_proj.weight"), TensorRole::linear, {nh * qk, *m.q_lora_rank}, l);
            } else {
                add(n.layer(l, "self_attn.q_proj.weight"), TensorRole::linear, {nh * qk, d}, l);
            }
            add(n.layer(l, "self_attn.kv_a_proj_with_mqa.weight"), TensorRole::linear,
                {m.kv_lora_rank + m.qk_rope_head_dim, d}, l);
            add(n.layer(l, "self_attn.kv_a_layernorm.weight"), TensorRole::norm, {m.kv_lora_rank}, l);
            add(n.layer(l, "self_attn.kv_b_proj.weight"), TensorRole::linear,
                {nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, l);
            if (m.use_output_gate)
                add(n.layer(l, "self_attn.g_proj.weight"), TensorRole::linear, {nh * m.v_head_dim, d}, l);
            add(n.layer(l, "self_attn.o_proj.weight"), TensorRole::linear, {d, nh * m.v_head_dim}, l);
        }
        if (!c.is_moe(l)) {
            const int64_t I = c.intermediate_size;
            add(n.dense_mlp(l, "gate_proj"), TensorRole::linear, {I, d}, l);
            add(n.dense_mlp(l, "up_proj"), TensorRole::linear, {I, d}, l);
            add(n.dense_mlp(l, "down_proj"), TensorRole::linear, {d, I}, l);
            continue;
        }
        const auto& m = c.moe;
        const int64_t E = m.num_experts, x = c.expert_in_dim(), I = m.moe_intermediate_size;
        add(n.layer(l, "block_sparse_moe.gate.weight"), TensorRole::router, {E, d}, l);
        if (m.router.use_correction_bias)
            add(n.layer(l, "block_sparse_moe.gate.e_score_correction_bias"), TensorRole::router_bias, {E}, l,
                DType::f32);
        if (m.routed_expert_hidden_size) {
            add(n.layer(l, "block_sparse_moe.routed_expert_down_proj.weight"), TensorRole::linear, {x, d}, l);
            add(n.layer(l, "block_sparse_moe.routed_expert_up_proj.weight"), TensorRole::linear, {d, x}, l);
            if (m.latent_moe_use_norm)
                add(n.layer(l, "block_sparse_moe.routed_expert_norm.weight"), TensorRole::norm, {x}, l);
        }
        if (m.num_shared_experts > 0) {
            const int64_t S = m.shared_intermediate_size();
            add(n.layer(l, "block_sparse_moe.shared_experts.gate_proj.weight"), TensorRole::linear, {S, d}, l);
            add(n.layer(l, "block_sparse_moe.shared_experts.up_proj.weight"), TensorRole::linear, {S, d}, l);
            add(n.layer(l, "block_sparse_moe.shared_experts.down_proj.weight"), TensorRole::linear, {d, S}, l);
        }
        for (int e = 0; e < m.num_experts; ++e) {
            for (ExpertProj p : {ExpertProj::w1, ExpertProj::w3, ExpertProj::w2}) {
                std::vector<int64_t> shape = p == ExpertProj::w2 ? std::vector<int64_t>{x, I}
                                                                 : std::vector<int64_t>{I, x};
                LogicalTensor t{n.expert(l, e, p), TensorRole::expert, std::move(shape), DType::bf16, l, e, p};
                out.push_back(std::move(t));
            }
        }
    }
    add(n.final_norm(), TensorRole::norm, {d});
    if (attn_res) {
        add(n.output_res_proj(), TensorRole::res_query, {1, d});
        add(n.output_res_norm(), TensorRole::norm, {d});
    }
    if (!c.tie_word_embeddings) add(n.lm_head(), TensorRole::lm_head, {c.vocab_size, d});
    return out;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
    const std::vector<LogicalTensor> logical = logical_tensors(c);
    const std::vector<DType> floats = {DType::bf16, DType::f16, DType::f32};
    std::vector<TensorSpec> out;
    out.reserve(logical.size() * 2);
    for (size_t i = 0; i < logical.size(); ++i) {
        const LogicalTensor& t = logical[i];
        if (t.role != TensorRole::expert || c.expert_format == ExpertFormat::bf16) {
            std::string name = t.role == TensorRole::expert ? t.name + ".weight" : t.name;
            TensorSpec s{name, t.dtype, t.shape, floats, {t.shape}, i, t.shape};
            if (t.role == TensorRole::a_log) {
                const int64_t H = c.kda.num_heads, K = c.kda.head_dim;
                for (std::vector<int64_t> alt : {std::vector<int64_t>{std::max(H, K)}, std::vector<int64_t>{H},
                                                 std::vector<int64_t>{1, 1, H, 1}})
                    if (std::find(s.accepted_shapes.begin(), s.accepted_shapes.end(), alt) == s.accepted_shapes.end())
                        s.accepted_shapes.push_back(alt);
            }
            out.push_back(std::move(s));
            continue;
        }
        const int64_t rows = t.shape[0], cols = t.shape[1];
        const bool mx = c.expert_format == ExpertFormat::mxfp4_g32;
        auto pshape = packed_shape(c.expert_format, rows, cols);
        auto sshape = scale_shape(rows, cols);
        DType pt = mx ? DType::u8 : DType::i32;
        out.push_back(TensorSpec{t.name + ".weight_packed", pt, pshape, {pt}, {pshape}, i, t.shape, TensorSpec::Part::packed});
        if (mx) {
            out.push_back(TensorSpec{t.name + ".weight_scale", DType::u8, sshape, {DType::u8, DType::f8_e8m0},
                                     {sshape}, i, t.shape, TensorSpec::Part::scale});
        } else {
            out.push_back(TensorSpec{t.name + ".weight_scale", DType::bf16, sshape, {DType::bf16}, {sshape}, i,
                                     t.shape, TensorSpec::Part::scale});
            out.push_back(TensorSpec{t.name + ".weight_shape", DType::i64, {2}, {DType::i64, DType::i32}, {{2}}, i,
                                     t.shape, TensorSpec::Part::shape_info});
        }
    }
    return out;
}

uint64_t expected_bytes(const ModelConfig& c) {
    uint64_t total = 0;
    for (const auto& s : expected_tensors(c)) total += s.nbytes();
    return total;
}

}  // namespace kiln::model
