// config.json parsing: the K3 and Kimi-Linear-48B fixtures, refusals naming the field, to_json round trip.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "model/tensor_names.hpp"
#include "model_test_util.hpp"

using namespace kiln::model;
using kiln::model::test::fixture;
using kiln::model::test::read_json;
using nlohmann::json;

namespace {

// parse_config must throw a ConfigError whose message contains `field` and `words`.
void expect_refused(const json& j, const std::string& field, const std::string& words = "") {
    try {
        parse_config(j, ParseOptions{.strict = true});
        FAIL("accepted a config that should be refused for ", field);
    } catch (const ConfigError& e) {
        std::string msg = e.what();
        INFO("message: ", msg);
        CHECK(msg.find(field) != std::string::npos);
        if (!words.empty()) CHECK(msg.find(words) != std::string::npos);
    }
}

}  // namespace

TEST_CASE("K3 config.json: every field the forward pass uses") {
    ModelConfig c = load_config(fixture("k3_config.json"), ParseOptions{.strict = true});
    CHECK(c.model_type == "kimi_k3");
    CHECK(c.layout == TensorLayout::k3);
    CHECK(c.hidden_size == 7168);
    CHECK(c.num_layers == 93);
    CHECK(c.vocab_size == 163840);
    CHECK(c.rms_norm_eps == doctest::Approx(1e-5));
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK(c.max_position_embeddings == 1048576);
    CHECK(c.bos_token_id == 163584);
    REQUIRE(c.eos_token_ids.size() == 1);
    CHECK(c.eos_token_ids[0] == 163586);
    CHECK(c.pad_token_id == 163839);

    // 1-based lists → 0-based kinds: 3 KDA : 1 MLA × 23 plus a final MLA.
    REQUIRE(c.layer_kinds.size() == 93);
    CHECK(c.num_kda_layers() == 69);
    CHECK(c.num_mla_layers() == 24);
    CHECK(c.is_kda(0));
    CHECK(c.is_kda(2));
    CHECK(c.is_mla(3));
    CHECK(c.is_kda(4));
    CHECK(c.is_mla(7));
    CHECK(c.is_mla(91));
    CHECK(c.is_mla(92));
    CHECK(c.is_kda(90));

    CHECK(c.kda.num_heads == 96);
    CHECK(c.kda.head_dim == 128);
    CHECK(c.kda.conv_size == 4);
    REQUIRE(c.kda.gate_lower_bound.has_value());
    CHECK(*c.kda.gate_lower_bound == -5.0f);
    CHECK(c.kda.use_full_rank_gate);
    CHECK(c.kda.inner_dim() == 12288);

    CHECK(c.mla.num_heads == 96);
    CHECK(c.mla.q_lora_rank == 1536);
    CHECK(c.mla.kv_lora_rank == 512);
    CHECK(c.mla.qk_nope_head_dim == 128);
    CHECK(c.mla.qk_rope_head_dim == 64);
    CHECK(c.mla.v_head_dim == 128);
    CHECK(c.mla.qk_head_dim() == 192);
    CHECK(c.mla.cache_dim() == 576);
    CHECK(c.mla.use_nope);
    CHECK(c.mla.use_output_gate);

    CHECK(c.moe.num_experts == 896);
    CHECK(c.moe.top_k == 16);
    CHECK(c.moe.num_shared_experts == 2);
    CHECK(c.moe.moe_intermediate_size == 3072);
    CHECK(c.moe.shared_intermediate_size() == 6144);
    CHECK(c.moe.routed_expert_hidden_size == 3584);
    CHECK(c.expert_in_dim() == 3584);
    CHECK(c.moe.latent_moe_use_norm);
    CHECK(c.moe.first_k_dense_replace == 1);
    CHECK_FALSE(c.is_moe(0));
    CHECK(c.is_moe(1));
    CHECK(c.intermediate_size == 33792);
    CHECK(c.moe.router.activation == RouterActivation::sigmoid);
    CHECK(c.moe.router.use_correction_bias);
    CHECK(c.moe.router.renormalize);
    CHECK(c.moe.router.routed_scaling_factor == 1.0f);
    CHECK(c.moe.router.num_expert_group == 1);
    CHECK(c.moe.router.topk_group == 1);

    CHECK(c.hidden_act == Activation::situ);
    CHECK(c.situ_beta == 4.0f);
    CHECK(c.situ_linear_beta == 25.0f);
    CHECK(c.attn_res_block_size == 12);
    CHECK(c.expert_format == ExpertFormat::mxfp4_g32);
}

TEST_CASE("Kimi-Linear-48B config.json") {
    ModelConfig c = load_config(fixture("kimi_linear_48b_config.json"), ParseOptions{.strict = true});
    CHECK(c.model_type == "kimi_linear");
    CHECK(c.layout == TensorLayout::kimi_linear);
    CHECK(c.hidden_size == 2304);
    CHECK(c.num_layers == 27);
    CHECK(c.num_kda_layers() == 20);
    CHECK(c.num_mla_layers() == 7);
    CHECK(c.is_mla(3));
    CHECK(c.is_mla(26));  // the last layer (27, 1-based) is MLA
    CHECK(c.is_kda(24));
    CHECK(c.kda.num_heads == 32);
    CHECK_FALSE(c.kda.gate_lower_bound.has_value());  // softplus gate
    CHECK_FALSE(c.kda.use_full_rank_gate);             // g_a_proj / g_b_proj
    CHECK_FALSE(c.mla.q_lora_rank.has_value());        // plain q_proj
    CHECK_FALSE(c.mla.use_output_gate);
    CHECK(c.moe.num_experts == 256);
    CHECK(c.moe.top_k == 8);
    CHECK(c.moe.num_shared_experts == 1);
    CHECK_FALSE(c.moe.routed_expert_hidden_size.has_value());  // no latent projection
    CHECK(c.expert_in_dim() == 2304);
    CHECK_FALSE(c.moe.latent_moe_use_norm);
    CHECK(c.moe.router.routed_scaling_factor == doctest::Approx(2.446));
    CHECK(c.moe.router.use_correction_bias);
    CHECK(c.intermediate_size == 9216);
    CHECK(c.hidden_act == Activation::silu);
    CHECK_FALSE(c.attn_res_block_size.has_value());  // plain residual
    CHECK(c.eos_token_ids == std::vector<int64_t>{163585});
    CHECK(c.max_position_embeddings == 1048576);  // model_max_length
    CHECK(c.expert_format == ExpertFormat::bf16);
    CHECK(c.dialect == ConfigDialect::moonshot);
}

TEST_CASE("Kimi-Linear-48B config.json as transformers 5.x saves it: the same model, its dense MLP renamed") {
    const ModelConfig moon = load_config(fixture("kimi_linear_48b_config.json"), ParseOptions{.strict = true});
    const ModelConfig hf =
        load_config(fixture("kimi_linear_48b_transformers_config.json"), ParseOptions{.strict = true});
    CHECK(hf.dialect == ConfigDialect::transformers);
    CHECK(hf.layout == TensorLayout::kimi_linear);
    CHECK(hf.layer_kinds == moon.layer_kinds);
    CHECK(hf.is_mla(26));
    CHECK(hf.kda.num_heads == 32);
    CHECK(hf.kda.head_dim == 128);
    CHECK(hf.kda.conv_size == 4);
    CHECK(hf.mla.use_nope);                     // no mla_use_nope: transformers' MLA is NoPE
    CHECK(hf.moe.first_k_dense_replace == 1);   // from mlp_layer_types
    CHECK(hf.max_position_embeddings == 1048576);
    // Every field the forward reads is the same: to_json in one dialect is to_json in the other.
    ModelConfig same = moon;
    same.dialect = ConfigDialect::transformers;
    CHECK(to_json(same) == to_json(hf));
    CHECK(TensorNames(hf).dense_mlp(0, "gate_proj") == "model.layers.0.block_sparse_moe.gate_proj.weight");
    CHECK(TensorNames(moon).dense_mlp(0, "gate_proj") == "model.layers.0.mlp.gate_proj.weight");
    // Kimi-Linear's MLA latent norms use eps 1e-6 in either dialect; K3 keeps rms_norm_eps.
    CHECK(hf.mla_latent_norm_eps() == 1e-6f);
    CHECK(moon.mla_latent_norm_eps() == 1e-6f);
    const ModelConfig k3 = load_config(fixture("k3_config.json"));
    CHECK(k3.mla_latent_norm_eps() == k3.rms_norm_eps);

    const json base = read_json(fixture("kimi_linear_48b_transformers_config.json"));
    auto parse = [](const json& j) { return parse_config(j, ParseOptions{.strict = true}); };
    SUBCASE("first_k_dense_replace: 1 by default, or mlp_layer_types") {
        json j = base;
        j.erase("mlp_layer_types");
        CHECK(parse(j).moe.first_k_dense_replace == 1);
        CHECK(parse(j).dialect == ConfigDialect::transformers);  // layer_types alone says so
        j["first_k_dense_replace"] = 3;
        CHECK(parse(j).moe.first_k_dense_replace == 3);
        j = base;
        j["mlp_layer_types"][1] = "dense";
        CHECK(parse(j).moe.first_k_dense_replace == 2);
        j["first_k_dense_replace"] = 2;
        CHECK(parse(j).moe.first_k_dense_replace == 2);
        j["first_k_dense_replace"] = 1;
        expect_refused(j, "first_k_dense_replace", "disagrees with mlp_layer_types, which starts with 2 dense layers");
        j = base;
        j["mlp_layer_types"][5] = "dense";
        expect_refused(j, "mlp_layer_types[5]", "dense layer after a sparse one");
        j = base;
        j["mlp_layer_types"][1] = "moe";
        expect_refused(j, "mlp_layer_types[1]", "\"moe\" is not supported (dense or sparse)");
        j = base;
        j["mlp_layer_types"].erase(0);
        expect_refused(j, "mlp_layer_types", "expected a list of 27 MLP types");
    }
    SUBCASE("layer_types") {
        json j = base;
        j["layer_types"][3] = "sliding_attention";
        expect_refused(j, "layer_types[3]", "\"sliding_attention\" is not supported");
        j = base;
        j["layer_types"].erase(26);
        expect_refused(j, "layer_types", "expected a list of 27 layer types");
        j = base;
        j.erase("layer_types");
        expect_refused(j, "linear_attn_config", "neither linear_attn_config nor layer_types");
        // A re-saved Moonshot config keeps linear_attn_config beside layer_types: they must agree.
        j = base;
        j["linear_attn_config"] = read_json(fixture("kimi_linear_48b_config.json"))["linear_attn_config"];
        CHECK(parse(j).layer_kinds == moon.layer_kinds);
        j["layer_types"][0] = "full_attention";
        expect_refused(j, "layer_types[0]", "disagrees with linear_attn_config, which makes layer 1 (1-based) KDA");
        j = base;
        j["linear_attn_config"] = read_json(fixture("kimi_linear_48b_config.json"))["linear_attn_config"];
        j["linear_num_heads"] = 16;
        expect_refused(j, "linear_num_heads", "16 differs from linear_attn_config.num_heads = 32");
        j = base;
        j.erase("linear_head_dim");
        expect_refused(j, "linear_head_dim", "missing");
    }
    SUBCASE("transformers' spellings and defaults") {
        json j = base;
        j["mla_use_nope"] = false;  // its MLA is NoPE whatever the flag says
        CHECK(parse(j).mla.use_nope);
        j = base;
        for (auto [moonshot, alt] : {std::pair{"num_experts", "num_local_experts"},
                                     std::pair{"num_experts_per_token", "num_experts_per_tok"},
                                     std::pair{"num_shared_experts", "n_shared_experts"},
                                     std::pair{"num_expert_group", "n_group"},
                                     std::pair{"moe_renormalize", "norm_topk_prob"}}) {
            j[alt] = j[moonshot];
            j.erase(moonshot);
        }
        j["max_position_embeddings"] = j["model_max_length"];
        j.erase("model_max_length");
        CHECK(to_json(parse(j)) == to_json(hf));
        j["num_experts"] = 128;  // both spellings: they must agree
        expect_refused(j, "num_local_experts", "256 differs from num_experts = 128");
        j = base;
        j["qk_head_dim"] = 190;
        expect_refused(j, "qk_head_dim", "190 is not qk_nope_head_dim + qk_rope_head_dim = 192");
        j = base;
        j["attn_res_block_size"] = 0;  // transformers' "none"
        CHECK_FALSE(parse(j).attn_res_block_size.has_value());
        // Its router always applies the groups (no use_grouped_topk switch).
        j = base;
        j["num_expert_group"] = 8;
        j["topk_group"] = 4;
        CHECK(parse(j).moe.router.num_expert_group == 8);
        json m = read_json(fixture("kimi_linear_48b_config.json"));
        m.erase("use_grouped_topk");
        m["num_expert_group"] = 8;
        CHECK(parse(m).moe.router.num_expert_group == 1);
    }
}

TEST_CASE("to_json writes the Hugging Face layout and parses back to the same config") {
    for (const char* name :
         {"k3_config.json", "kimi_linear_48b_config.json", "kimi_linear_48b_transformers_config.json"}) {
        INFO(name);
        ModelConfig a = load_config(fixture(name));
        json j = to_json(a);
        CHECK(j["model_type"] == a.model_type);
        if (a.layout == TensorLayout::k3) {
            CHECK(j["text_config"]["model_type"] == "kimi_linear");
            CHECK(j["quantization_config"]["format"] == "mxfp4-pack-quantized");
            CHECK(j["text_config"]["linear_attn_config"]["full_attn_layers"].back() == 93);
        }
        ModelConfig b = parse_config(j, ParseOptions{.strict = true});
        CHECK(to_json(b) == j);
        CHECK(b.layer_kinds == a.layer_kinds);
        CHECK(b.rms_norm_eps == a.rms_norm_eps);
        CHECK(b.kda.gate_lower_bound == a.kda.gate_lower_bound);
        CHECK(b.moe.router.routed_scaling_factor == a.moe.router.routed_scaling_factor);
        CHECK(b.expert_format == a.expert_format);
    }
    // INT4 experts on the 48B layout: quantization_config at the top level.
    ModelConfig c = load_config(fixture("kimi_linear_48b_config.json"));
    c.expert_format = ExpertFormat::int4_g32;
    json j = to_json(c);
    CHECK(j["quantization_config"]["format"] == "pack-quantized");
    CHECK(parse_config(j).expert_format == ExpertFormat::int4_g32);
}

TEST_CASE("unknown or inconsistent configs are refused naming the field") {
    const json k3 = read_json(fixture("k3_config.json"));
    const json l48 = read_json(fixture("kimi_linear_48b_config.json"));

    SUBCASE("model types") {
        json j = k3;
        j["model_type"] = "deepseek_v3";
        expect_refused(j, "model_type", "deepseek_v3");
        j = k3;
        j["text_config"]["model_type"] = "llama";
        expect_refused(j, "text_config.model_type", "llama");
        j = k3;
        j.erase("text_config");
        expect_refused(j, "text_config", "missing");
    }
    SUBCASE("layer lists") {
        json j = k3;
        j["text_config"]["linear_attn_config"]["full_attn_layers"].push_back(3);  // 3 is also KDA
        expect_refused(j, "text_config.linear_attn_config.full_attn_layers", "listed twice");
        j = k3;
        j["text_config"]["linear_attn_config"]["full_attn_layers"].erase(
            j["text_config"]["linear_attn_config"]["full_attn_layers"].size() - 1);  // drop 93
        expect_refused(j, "text_config.linear_attn_config.kda_layers", "layer 93");
        j = l48;
        j["linear_attn_config"]["kda_layers"][0] = 0;  // 0 is not a 1-based layer
        expect_refused(j, "linear_attn_config.kda_layers", "1-based");
        j = l48;
        j["num_hidden_layers"] = 28;
        expect_refused(j, "linear_attn_config.kda_layers", "layer 28");
    }
    SUBCASE("values kiln does not implement") {
        json j = k3;
        j["text_config"]["hidden_act"] = "gelu";
        expect_refused(j, "text_config.hidden_act", "gelu");
        j = l48;
        j["mla_use_nope"] = false;
        expect_refused(j, "mla_use_nope", "not supported");
        j = l48;
        j["moe_router_activation_func"] = "softmax";
        expect_refused(j, "moe_router_activation_func", "softmax");
        j = l48;
        j["num_key_value_heads"] = 8;
        expect_refused(j, "num_key_value_heads", "differs");
        j = l48;
        j["num_nextn_predict_layers"] = 1;
        expect_refused(j, "num_nextn_predict_layers");
    }
    SUBCASE("inconsistent numbers") {
        json j = k3;
        j["text_config"]["num_experts_per_token"] = 1000;
        expect_refused(j, "text_config.num_experts_per_token", "outside");
        j = k3;
        j["text_config"]["hidden_size"] = -1;
        expect_refused(j, "text_config.hidden_size", "-1 is out of range [1,");
        j = k3;
        j["text_config"]["hidden_size"] = "wide";
        expect_refused(j, "text_config.hidden_size", "integer");
        j = k3;
        j["text_config"]["linear_attn_config"]["gate_lower_bound"] = 2.0;
        expect_refused(j, "text_config.linear_attn_config.gate_lower_bound", "2 is out of range [-100, 0)");
        j = k3;
        j["text_config"]["routed_expert_hidden_size"] = 3580;  // not a multiple of the MXFP4 group
        expect_refused(j, "text_config.routed_expert_hidden_size", "multiple of");
        j = l48;
        j["latent_moe_use_norm"] = true;  // a latent norm without a latent
        expect_refused(j, "latent_moe_use_norm", "routed_expert_hidden_size");
        j = k3;
        j["eos_token_id"] = 200000;
        expect_refused(j, "eos_token_id", "vocab_size");
        j = k3;
        j["text_config"].erase("kv_lora_rank");
        expect_refused(j, "text_config.kv_lora_rank", "missing");
    }
    SUBCASE("quantization_config") {
        json j = k3;
        j["quantization_config"]["quant_method"] = "gptq";
        expect_refused(j, "quantization_config.quant_method", "gptq");
        j = k3;
        j["quantization_config"]["config_groups"]["group_0"]["format"] = "nvfp4-pack-quantized";
        expect_refused(j, "quantization_config.config_groups.group_0.format", "nvfp4");
        j = k3;
        j["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 128;
        expect_refused(j, "quantization_config.config_groups.group_0.weights.group_size", "128");
        j = k3;
        j["quantization_config"]["config_groups"]["group_0"]["format"] = "pack-quantized";
        j["quantization_config"]["format"] = "pack-quantized";
        expect_refused(j, "quantization_config.config_groups.group_0.weights.type", "float");
    }
    SUBCASE("unknown keys: refused in strict mode, accepted otherwise") {
        json j = k3;
        j["text_config"]["attn_res_use_magic"] = true;
        expect_refused(j, "text_config.attn_res_use_magic", "unknown");
        CHECK_NOTHROW(parse_config(j));
    }
}

TEST_CASE("numeric fields are range-checked before narrowing, errors name the field") {
    const json k3 = read_json(fixture("k3_config.json"));
    const json l48 = read_json(fixture("kimi_linear_48b_config.json"));
    auto with = [](json j, const json::json_pointer& at, const json& v) {
        j[at] = v;
        return j;
    };
    using P = json::json_pointer;

    SUBCASE("layer numbers beyond 32 bits do not wrap") {
        // 4294967297 = 2^32 + 1 would read as layer 1 after narrowing.
        expect_refused(with(l48, P("/linear_attn_config/kda_layers/0"), 4294967297LL),
                       "linear_attn_config.kda_layers[0]", "4294967297 is outside 1..27");
        expect_refused(with(l48, P("/linear_attn_config/full_attn_layers/6"), json(18446744073709551615ULL)),
                       "linear_attn_config.full_attn_layers[6]", "18446744073709551615");
        expect_refused(with(k3, P("/text_config/linear_attn_config/kda_layers/1"), -4294967294LL),
                       "text_config.linear_attn_config.kda_layers[1]", "outside 1..93");
        expect_refused(with(l48, P("/linear_attn_config/kda_layers/2"), 3.0),
                       "linear_attn_config.kda_layers[2]", "expected an integer");
    }
    SUBCASE("token ids") {
        expect_refused(with(l48, P("/eos_token_id"), -1), "eos_token_id", "out of range");
        expect_refused(with(l48, P("/eos_token_id"), json::array({163585, -5})), "eos_token_id[1]", "out of range");
        expect_refused(with(k3, P("/eos_token_id"), json::array({163586, 163840})), "eos_token_id[1]", "vocab_size");
        expect_refused(with(k3, P("/bos_token_id"), 4294967296LL + 163584), "bos_token_id", "out of range");
        expect_refused(with(l48, P("/pad_token_id"), 1e20), "pad_token_id", "out of range");
        expect_refused(with(l48, P("/pad_token_id"), 163839.5), "pad_token_id", "expected an integer");
        expect_refused(with(k3, P("/text_config/bos_token_id"), -2), "text_config.bos_token_id", "out of range");
        CHECK(parse_config(with(l48, P("/eos_token_id"), json::array({163585, 163586}))).eos_token_ids ==
              std::vector<int64_t>{163585, 163586});
    }
    SUBCASE("the context holds at least a prompt token and a generated one") {
        expect_refused(with(l48, P("/max_position_embeddings"), 0), "max_position_embeddings", "out of range [2,");
        expect_refused(with(k3, P("/text_config/max_position_embeddings"), 1),
                       "text_config.max_position_embeddings", "out of range [2,");
        expect_refused(with(l48, P("/max_position_embeddings"), int64_t(1) << 41), "max_position_embeddings");
        CHECK(parse_config(with(l48, P("/max_position_embeddings"), 2)).max_position_embeddings == 2);
    }
    SUBCASE("integer dims") {
        expect_refused(with(k3, P("/text_config/hidden_size"), 4294967297LL), "text_config.hidden_size",
                       "out of range");
        expect_refused(with(k3, P("/text_config/hidden_size"), 1 << 20), "text_config.hidden_size",
                       "out of range [1, 131072]");
        expect_refused(with(k3, P("/text_config/num_hidden_layers"), 0), "text_config.num_hidden_layers",
                       "out of range");
        expect_refused(with(l48, P("/vocab_size"), 1 << 27), "vocab_size", "out of range");
        expect_refused(with(l48, P("/num_experts"), 1 << 17), "num_experts", "out of range [1, 65536]");
        expect_refused(with(l48, P("/num_shared_experts"), -1), "num_shared_experts", "out of range");
        expect_refused(with(l48, P("/linear_attn_config/head_dim"), 1 << 13), "linear_attn_config.head_dim",
                       "out of range [1, 4096]");
        expect_refused(with(l48, P("/linear_attn_config/short_conv_kernel_size"), 0),
                       "linear_attn_config.short_conv_kernel_size", "out of range [1, 16]");
        expect_refused(with(l48, P("/qk_rope_head_dim"), -64), "qk_rope_head_dim", "out of range");
        expect_refused(with(k3, P("/text_config/attn_res_block_size"), 1 << 20), "text_config.attn_res_block_size",
                       "out of range");
        expect_refused(with(l48, P("/first_k_dense_replace"), 28), "first_k_dense_replace", "out of range [0, 27]");
    }
    SUBCASE("scalars are finite (in fp32) and in range") {
        expect_refused(with(l48, P("/rms_norm_eps"), 1e39), "rms_norm_eps", "finite");  // finite double, inf float
        expect_refused(with(l48, P("/rms_norm_eps"), 0.0), "rms_norm_eps", "out of range (0, 1]");
        expect_refused(with(l48, P("/rms_norm_eps"), 1e-50), "rms_norm_eps", "out of range");  // 0 in fp32
        expect_refused(with(l48, P("/rms_norm_eps"), 2.0), "rms_norm_eps", "out of range");
        expect_refused(with(l48, P("/routed_scaling_factor"), 1e39), "routed_scaling_factor", "finite");
        expect_refused(with(l48, P("/routed_scaling_factor"), -2.446), "routed_scaling_factor", "out of range");
        expect_refused(with(k3, P("/text_config/activation_situ_beta"), 1e39), "text_config.activation_situ_beta",
                       "finite");
        expect_refused(with(k3, P("/text_config/activation_situ_linear_beta"), 0.0),
                       "text_config.activation_situ_linear_beta", "out of range");
        expect_refused(with(k3, P("/text_config/linear_attn_config/gate_lower_bound"), -1e30),
                       "text_config.linear_attn_config.gate_lower_bound", "out of range [-100, 0)");
        // Configs built in code go through the same ranges.
        ModelConfig c = parse_config(l48);
        c.rms_norm_eps = std::numeric_limits<float>::quiet_NaN();
        CHECK_THROWS_WITH_AS(validate_config(c), doctest::Contains("rms_norm_eps: nan is out of range"), ConfigError);
        c = parse_config(l48);
        c.max_position_embeddings = 1;
        CHECK_THROWS_WITH_AS(validate_config(c), doctest::Contains("max_position_embeddings"), ConfigError);
    }
}

TEST_CASE("load_config names the file") {
    kiln::model::test::ScratchDir dir("config");
    kiln::model::test::write_file(dir / "config.json", "{\"model_type\": \"kimi_linear\", ");
    try {
        load_config(dir.path());
        FAIL("accepted truncated JSON");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()).find("config.json") != std::string::npos);
        CHECK(std::string(e.what()).find("not valid JSON") != std::string::npos);
    }
    CHECK_THROWS_AS(load_config(dir / "absent"), kiln::IoError);
}
