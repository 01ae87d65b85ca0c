#include "model/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/log.hpp"
#include "runtime/strings.hpp"

namespace kiln::model {

using nlohmann::json;

namespace {

// Keys of a kimi_linear config that kiln reads nowhere but knows to be harmless for the forward pass.
const std::set<std::string> kIgnoredKeys = {
    "_name_or_path", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version",
    "initializer_range", "use_cache", "rope_theta", "rope_scaling", "head_dim", "model_max_length",
    "attention_dropout", "attention_bias", "output_router_logits", "router_aux_loss_coef",
    "aux_loss_alpha", "seq_aux", "pretraining_tp", "media_placeholder_token_id", "image_placeholder",
    "return_dict", "output_hidden_states", "output_attentions", "chunk_size_feed_forward",
    "is_encoder_decoder", "tokenizer_class", "id2label", "label2id", "problem_type", "rope_parameters",
};

// Integers the parser accepts before the per-field ranges of validate(): nothing wraps when narrowed to int,
// and products of two stay far inside int64.
constexpr int64_t kMaxIntField = int64_t(1) << 30;
constexpr int64_t kMaxTokenId = (int64_t(1) << 32) - 1;
constexpr int64_t kMinContext = 2;
constexpr int64_t kMaxContext = int64_t(1) << 40;

// Reads fields of one JSON object, naming `path.key` in every error and remembering which keys it saw.
class Fields {
public:
    Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
        if (!obj_.is_object()) fail_at(path_.empty() ? "config" : path_.substr(0, path_.size() - 1),
                                       "expected a JSON object");
    }

    std::string name(const std::string& key) const { return path_ + key; }

    [[noreturn]] void fail(const std::string& key, const std::string& why) const { fail_at(name(key), why); }
    [[noreturn]] static void fail_at(const std::string& field, const std::string& why) {
        throw ConfigError(fmt::format("{}: {}", field, why));
    }

    const json* find(const std::string& key) {
        used_.insert(key);
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    bool explicit_null(const std::string& key) {
        used_.insert(key);
        auto it = obj_.find(key);
        return it != obj_.end() && it->is_null();
    }
    const json& need(const std::string& key) {
        const json* v = find(key);
        if (!v) fail(key, "missing");
        return *v;
    }

    static std::string show(const json& v) {
        std::string s = v.dump();
        return s.size() > 60 ? s.substr(0, 57) + "..." : s;
    }

    // An integer (or a float with an integral value) in [lo, hi], checked before any narrowing. `key` may
    // carry an index ("kda_layers[3]").
    int64_t int_in(const std::string& key, const json& v, int64_t lo, int64_t hi) const {
        auto out_of_range = [&] { fail(key, fmt::format("{} is out of range [{}, {}]", show(v), lo, hi)); };
        if (v.is_number_unsigned()) {
            if (v.get<uint64_t>() > uint64_t(hi)) out_of_range();
        } else if (v.is_number_float()) {
            const double d = v.get<double>();
            if (!std::isfinite(d) || d != std::floor(d)) fail(key, fmt::format("expected an integer, got {}", show(v)));
            if (d < double(lo) || d > double(hi)) out_of_range();
            return int64_t(d);
        } else if (!v.is_number_integer()) {
            fail(key, fmt::format("expected an integer, got {}", show(v)));
        }
        const int64_t x = v.get<int64_t>();
        if (x < lo || x > hi) out_of_range();
        return x;
    }
    int positive_int(const std::string& key) { return int(int_in(key, need(key), 1, kMaxIntField)); }
    int nonneg_int(const std::string& key, std::optional<int> fallback = std::nullopt) {
        const json* v = find(key);
        if (!v) {
            if (fallback) return *fallback;
            fail(key, "missing");
        }
        return int(int_in(key, *v, 0, kMaxIntField));
    }
    std::optional<int> optional_positive_int(const std::string& key) {
        if (!find(key)) return std::nullopt;
        return positive_int(key);
    }
    std::optional<int64_t> optional_token_id(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        return int_in(key, *v, 0, kMaxTokenId);
    }
    // eos_token_id: one id or a list of them (errors name the element, "eos_token_id[1]").
    std::optional<std::vector<int64_t>> optional_token_ids(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        std::vector<int64_t> ids;
        if (!v->is_array()) {
            ids.push_back(int_in(key, *v, 0, kMaxTokenId));
            return ids;
        }
        for (size_t i = 0; i < v->size(); ++i)
            ids.push_back(int_in(fmt::format("{}[{}]", key, i), (*v)[i], 0, kMaxTokenId));
        return ids;
    }
    bool boolean(const std::string& key, std::optional<bool> fallback = std::nullopt) {
        const json* v = find(key);
        if (!v) {
            if (fallback) return *fallback;
            fail(key, "missing");
        }
        if (!v->is_boolean()) fail(key, fmt::format("expected true or false, got {}", show(*v)));
        return v->get<bool>();
    }
    // A number that is finite as a float (1e39 is finite in JSON but not in fp32).
    std::optional<float> optional_number(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) fail(key, fmt::format("expected a number, got {}", show(*v)));
        double d = v->get<double>();
        if (!std::isfinite(d) || !std::isfinite(float(d)))
            fail(key, fmt::format("expected a finite number, got {}", show(*v)));
        return float(d);
    }
    float number(const std::string& key, std::optional<float> fallback = std::nullopt) {
        auto v = optional_number(key);
        if (v) return *v;
        if (fallback) return *fallback;
        fail(key, "missing");
    }
    std::optional<std::string> optional_string(const std::string& key) {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) fail(key, fmt::format("expected a string, got {}", show(*v)));
        return v->get<std::string>();
    }
    std::string string(const std::string& key) {
        auto v = optional_string(key);
        if (!v) fail(key, "missing");
        return *v;
    }
    // `key`, or `alt` when only that spelling is present (transformers' KimiLinearConfig declares n_group,
    // num_experts_per_tok, ... and maps them onto the Moonshot names). Both present must agree.
    std::string pick(const std::string& key, const std::string& alt) {
        const json* a = find(key);
        const json* b = find(alt);
        if (!b) return key;
        if (!a) return alt;
        if (*a != *b) fail(alt, fmt::format("{} differs from {} = {}", show(*b), name(key), show(*a)));
        return key;
    }

    // Keys present in the object that nobody read and that are not known to be harmless.
    void check_unknown(const ParseOptions& opts) const {
        std::vector<std::string> unknown;
        for (auto it = obj_.begin(); it != obj_.end(); ++it)
            if (!used_.count(it.key()) && !kIgnoredKeys.count(it.key())) unknown.push_back(path_ + it.key());
        if (unknown.empty()) return;
        if (opts.strict)
            throw ConfigError(fmt::format("{}: unknown field{} (strict mode)", join(unknown, ", "),
                                          unknown.size() > 1 ? "s" : ""));
        if (!opts.quiet)
            log::warn("config: ignoring unknown field{} {}", unknown.size() > 1 ? "s" : "", join(unknown, ", "));
    }

private:
    const json& obj_;
    std::string path_;
    std::set<std::string> used_;
};

// A list of 1-based layer numbers, each in 1..num_layers (checked before narrowing: 4294967297 is not 1).
std::vector<int> layer_list(Fields& f, const std::string& key, int num_layers) {
    const json& v = f.need(key);
    if (!v.is_array()) f.fail(key, fmt::format("expected a list of 1-based layer numbers, got {}", Fields::show(v)));
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string elem = fmt::format("{}[{}]", key, i);
        if (!v[i].is_number_integer()) f.fail(elem, fmt::format("expected an integer, got {}", Fields::show(v[i])));
        const bool in_range = v[i].is_number_unsigned()
                                  ? v[i].get<uint64_t>() >= 1 && v[i].get<uint64_t>() <= uint64_t(num_layers)
                                  : v[i].get<int64_t>() >= 1 && v[i].get<int64_t>() <= num_layers;
        if (!in_range)
            f.fail(elem, fmt::format("layer {} is outside 1..{} (the lists are 1-based)", Fields::show(v[i]),
                                     num_layers));
        out.push_back(int(v[i].get<int64_t>()));
    }
    return out;
}

// transformers' layer_types: one "linear_attention" (KDA) or "full_attention" (MLA) per layer.
std::vector<LayerKind> layer_types(Fields& f, const std::string& key, int num_layers) {
    const json& v = f.need(key);
    if (!v.is_array() || v.size() != size_t(num_layers))
        f.fail(key, fmt::format("expected a list of {} layer types (num_hidden_layers), got {}", num_layers,
                                Fields::show(v)));
    std::vector<LayerKind> kinds;
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == "linear_attention") kinds.push_back(LayerKind::kda);
        else if (v[i] == "full_attention") kinds.push_back(LayerKind::mla);
        else
            f.fail(fmt::format("{}[{}]", key, i),
                   fmt::format("{} is not supported (linear_attention or full_attention)", Fields::show(v[i])));
    }
    return kinds;
}

// transformers' mlp_layer_types: "dense" or "sparse" (MoE) per layer, the dense ones first. Returns how many.
int leading_dense_layers(Fields& f, const std::string& key, int num_layers) {
    const json& v = f.need(key);
    if (!v.is_array() || v.size() != size_t(num_layers))
        f.fail(key, fmt::format("expected a list of {} MLP types (num_hidden_layers), got {}", num_layers,
                                Fields::show(v)));
    int dense = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string elem = fmt::format("{}[{}]", key, i);
        if (v[i] != "dense" && v[i] != "sparse")
            f.fail(elem, fmt::format("{} is not supported (dense or sparse)", Fields::show(v[i])));
        if (v[i] == "sparse") continue;
        if (size_t(dense) != i)
            f.fail(elem, "a dense layer after a sparse one is not supported (the dense layers must come first)");
        ++dense;
    }
    return dense;
}

ExpertFormat parse_quantization(const json& q, const std::string& path) {
    Fields f(q, path);
    std::string method = f.string("quant_method");
    if (method != "compressed-tensors")
        f.fail("quant_method", fmt::format("'{}' is not supported (only compressed-tensors)", method));
    std::optional<std::string> format = f.optional_string("format");
    const json* groups = f.find("config_groups");
    if (!groups || !groups->is_object() || groups->empty())
        f.fail("config_groups", "expected an object with at least one quantisation group");
    ExpertFormat result = ExpertFormat::bf16;
    bool first = true;
    for (auto it = groups->begin(); it != groups->end(); ++it) {
        const std::string gpath = path + "config_groups." + it.key() + ".";
        Fields g(it.value(), gpath);
        std::optional<std::string> gformat = g.optional_string("format");
        std::string fmt_name = gformat ? *gformat : format.value_or("");
        if (fmt_name.empty()) f.fail("format", "missing (neither the quantization_config nor the group names one)");
        ExpertFormat gf;
        if (fmt_name == "pack-quantized") {
            gf = ExpertFormat::int4_g32;
        } else if (fmt_name == "mxfp4-pack-quantized") {
            gf = ExpertFormat::mxfp4_g32;
        } else {
            (gformat ? g : f).fail("format", fmt::format(
                "'{}' is not supported (pack-quantized INT4 or mxfp4-pack-quantized)", fmt_name));
        }
        Fields w(g.need("weights"), gpath + "weights.");
        int bits = w.positive_int("num_bits");
        if (bits != 4) w.fail("num_bits", fmt::format("{} is not supported (4-bit only)", bits));
        int group = w.positive_int("group_size");
        if (group != kExpertGroupSize)
            w.fail("group_size", fmt::format("{} is not supported (group size 32 only)", group));
        if (auto strategy = w.optional_string("strategy"); strategy && *strategy != "group")
            w.fail("strategy", fmt::format("'{}' is not supported (group only)", *strategy));
        auto type = w.optional_string("type");
        if (gf == ExpertFormat::int4_g32) {
            if (type && *type != "int") w.fail("type", fmt::format("'{}' does not match pack-quantized (int)", *type));
            if (!w.boolean("symmetric", true)) w.fail("symmetric", "asymmetric INT4 (zero points) is not supported");
        } else if (type && *type != "float") {
            w.fail("type", fmt::format("'{}' does not match mxfp4-pack-quantized (float)", *type));
        }
        if (!first && gf != result)
            f.fail("config_groups", "groups use different weight formats");
        result = gf;
        first = false;
    }
    return result;
}

// A float written as its shortest decimal (1e-05, not 9.999999747378752e-06).
json num(float v) { return json(std::stod(fmt::format("{}", v))); }

void check(bool ok, const std::string& field, const std::string& why) {
    if (!ok) throw ConfigError(fmt::format("{}: {}", field, why));
}

std::string text_prefix(const ModelConfig& c) { return c.layout == TensorLayout::k3 ? "text_config." : ""; }

// Per-field ranges: generous bounds around every published Kimi model, tight enough that no product of
// dims or position count overflows and no nonsense value (a 0-position context, an infinite eps) passes.
constexpr int64_t kMaxHidden = int64_t(1) << 17;      // hidden_size, routed_expert_hidden_size, LoRA ranks
constexpr int64_t kMaxLayers = 4096;                   // num_hidden_layers
constexpr int64_t kMaxVocab = int64_t(1) << 26;        // vocab_size
constexpr int64_t kMaxHeads = 4096;                    // KDA / MLA heads
constexpr int64_t kMaxHeadDim = 4096;                  // KDA head_dim, MLA qk_nope / qk_rope / v head dims
constexpr int64_t kMaxIntermediate = int64_t(1) << 20; // intermediate_size, moe_intermediate_size
constexpr int64_t kMaxExperts = int64_t(1) << 16;      // num_experts
constexpr int64_t kMaxSharedExperts = 256;             // num_shared_experts
constexpr int64_t kMaxBlock = 4096;                    // attn_res_block_size
constexpr double kMaxScale = 1e4;                      // routed_scaling_factor, SiTU betas
constexpr double kMinGateLowerBound = -100.0;          // exp(-100) per step is already no memory at all

void range(int64_t v, int64_t lo, int64_t hi, const std::string& field) {
    check(v >= lo && v <= hi, field, fmt::format("{} is out of range [{}, {}]", v, lo, hi));
}

// lo < v <= hi (open below) or lo <= v < hi (open above), finite.
void range_f(float v, double lo, double hi, bool open_lo, bool open_hi, const std::string& field) {
    const bool ok = std::isfinite(v) && (open_lo ? v > lo : v >= lo) && (open_hi ? v < hi : v <= hi);
    check(ok, field, fmt::format("{} is out of range {}{}, {}{}", v, open_lo ? "(" : "[", lo, hi, open_hi ? ")" : "]"));
}

void validate(const ModelConfig& c, const std::string& p) {
    range(c.hidden_size, 1, kMaxHidden, p + "hidden_size");
    range(c.num_layers, 1, kMaxLayers, p + "num_hidden_layers");
    range(c.vocab_size, 1, kMaxVocab, p + "vocab_size");
    range_f(c.rms_norm_eps, 0.0, 1.0, true, false, p + "rms_norm_eps");
    if (c.max_position_embeddings != 0)  // 0: the config does not say
        range(c.max_position_embeddings, kMinContext, kMaxContext, p + "max_position_embeddings");
    check(int(c.layer_kinds.size()) == c.num_layers, p + "linear_attn_config",
          fmt::format("layer lists cover {} layers, num_hidden_layers is {}", c.layer_kinds.size(), c.num_layers));

    const std::string la = p + "linear_attn_config.";
    if (c.num_kda_layers() > 0) {
        range(c.kda.num_heads, 1, kMaxHeads, la + "num_heads");
        range(c.kda.head_dim, 1, kMaxHeadDim, la + "head_dim");
        range(c.kda.conv_size, 1, 16, la + "short_conv_kernel_size");
    }
    if (c.kda.gate_lower_bound)
        range_f(*c.kda.gate_lower_bound, kMinGateLowerBound, 0.0, false, true, la + "gate_lower_bound");

    if (c.num_mla_layers() > 0) {
        range(c.mla.num_heads, 1, kMaxHeads, p + "num_attention_heads");
        if (c.mla.q_lora_rank) range(*c.mla.q_lora_rank, 1, kMaxHidden, p + "q_lora_rank");
        range(c.mla.kv_lora_rank, 1, kMaxHidden, p + "kv_lora_rank");
        range(c.mla.qk_nope_head_dim, 1, kMaxHeadDim, p + "qk_nope_head_dim");
        range(c.mla.qk_rope_head_dim, 0, kMaxHeadDim, p + "qk_rope_head_dim");
        range(c.mla.v_head_dim, 1, kMaxHeadDim, p + "v_head_dim");
        check(c.mla.use_nope, p + "mla_use_nope", "false (rotary MLA) is not supported; K3 and Kimi-Linear use NoPE");
    }

    range(c.moe.first_k_dense_replace, 0, c.num_layers, p + "first_k_dense_replace");
    if (c.moe.first_k_dense_replace > 0) range(c.intermediate_size, 1, kMaxIntermediate, p + "intermediate_size");
    if (c.moe.first_k_dense_replace < c.num_layers) {
        const auto& m = c.moe;
        range(m.num_experts, 1, kMaxExperts, p + "num_experts");
        check(m.top_k > 0 && m.top_k <= m.num_experts, p + "num_experts_per_token",
              fmt::format("{} is outside [1, num_experts = {}]", m.top_k, m.num_experts));
        range(m.moe_intermediate_size, 1, kMaxIntermediate, p + "moe_intermediate_size");
        range(m.num_shared_experts, 0, kMaxSharedExperts, p + "num_shared_experts");
        if (m.routed_expert_hidden_size)
            range(*m.routed_expert_hidden_size, 1, kMaxHidden, p + "routed_expert_hidden_size");
        check(!m.latent_moe_use_norm || m.routed_expert_hidden_size, p + "latent_moe_use_norm",
              "true needs routed_expert_hidden_size (the latent the norm applies to)");
        const auto& r = m.router;
        check(r.num_expert_group >= 1 && m.num_experts % r.num_expert_group == 0, p + "num_expert_group",
              fmt::format("{} does not divide num_experts = {}", r.num_expert_group, m.num_experts));
        check(r.topk_group >= 1 && r.topk_group <= r.num_expert_group, p + "topk_group",
              fmt::format("{} is outside [1, num_expert_group = {}]", r.topk_group, r.num_expert_group));
        check(m.top_k <= r.topk_group * (m.num_experts / r.num_expert_group), p + "num_experts_per_token",
              "exceeds the experts in the selected groups");
        range_f(r.routed_scaling_factor, 0.0, kMaxScale, true, false, p + "routed_scaling_factor");
        if (c.expert_format != ExpertFormat::bf16) {
            check(c.expert_in_dim() % kExpertGroupSize == 0,
                  p + (m.routed_expert_hidden_size ? "routed_expert_hidden_size" : "hidden_size"),
                  fmt::format("{} is not a multiple of the quantisation group size 32", c.expert_in_dim()));
            check(m.moe_intermediate_size % kExpertGroupSize == 0, p + "moe_intermediate_size",
                  fmt::format("{} is not a multiple of the quantisation group size 32", m.moe_intermediate_size));
        }
    }
    if (c.hidden_act == Activation::situ) {
        range_f(c.situ_beta, 0.0, kMaxScale, true, false, p + "activation_situ_beta");
        if (c.situ_linear_beta)
            range_f(*c.situ_linear_beta, 0.0, kMaxScale, true, false, p + "activation_situ_linear_beta");
    }
    if (c.attn_res_block_size) range(*c.attn_res_block_size, 1, kMaxBlock, p + "attn_res_block_size");
    auto check_id = [&](const std::optional<int64_t>& id, const std::string& key) {
        if (id)
            check(*id >= 0 && *id < c.vocab_size, key,
                  fmt::format("{} is not a token id below vocab_size = {}", *id, c.vocab_size));
    };
    check_id(c.bos_token_id, "bos_token_id");
    check_id(c.pad_token_id, "pad_token_id");
    for (size_t i = 0; i < c.eos_token_ids.size(); ++i)
        check_id(c.eos_token_ids[i], c.eos_token_ids.size() > 1 ? fmt::format("eos_token_id[{}]", i) : "eos_token_id");
}

void parse_text_config(ModelConfig& c, Fields& f, const ParseOptions& opts) {
    c.hidden_size = f.positive_int("hidden_size");
    c.num_layers = f.positive_int("num_hidden_layers");
    c.vocab_size = f.positive_int("vocab_size");
    c.rms_norm_eps = f.number("rms_norm_eps", 1e-5f);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    // The context: a model of 0 or 1 positions cannot hold a prompt and the token generated after it.
    // transformers' KimiLinearConfig stores it as model_max_length (its attribute_map).
    const std::string max_pos = f.find("max_position_embeddings") ? "max_position_embeddings" : "model_max_length";
    if (const json* v = f.find(max_pos)) c.max_position_embeddings = f.int_in(max_pos, *v, kMinContext, kMaxContext);

    c.bos_token_id = f.optional_token_id("bos_token_id");
    c.pad_token_id = f.optional_token_id("pad_token_id");
    if (auto ids = f.optional_token_ids("eos_token_id")) c.eos_token_ids = std::move(*ids);

    // Activation.
    std::string act = f.optional_string("hidden_act").value_or("silu");
    if (act == "silu" || act == "swiglu") c.hidden_act = Activation::silu;
    else if (act == "situ") c.hidden_act = Activation::situ;
    else f.fail("hidden_act", fmt::format("'{}' is not supported (silu or situ)", act));
    c.situ_beta = f.number("activation_situ_beta", 4.0f);
    if (f.explicit_null("activation_situ_linear_beta")) c.situ_linear_beta.reset();
    else c.situ_linear_beta = f.number("activation_situ_linear_beta", 25.0f);

    // Which writer: transformers 5.x describes layers by per-layer type lists, Moonshot by linear_attn_config.
    c.dialect = f.find("layer_types") || f.find("mlp_layer_types") ? ConfigDialect::transformers
                                                                   : ConfigDialect::moonshot;
    const bool hf = c.dialect == ConfigDialect::transformers;

    // Layer kinds and KDA: linear_attn_config (1-based lists) and/or layer_types; both present must agree.
    {
        const json* la_json = f.find("linear_attn_config");
        const json* types = f.find("layer_types");
        if (!la_json && !types)
            f.fail("linear_attn_config",
                   "missing (neither linear_attn_config nor layer_types says which layers are KDA)");
        std::optional<Fields> la;
        if (la_json) {
            la.emplace(*la_json, f.name("linear_attn_config."));
            std::vector<int> kda = layer_list(*la, "kda_layers", c.num_layers);
            std::vector<int> full = layer_list(*la, "full_attn_layers", c.num_layers);
            c.layer_kinds.assign(size_t(c.num_layers), LayerKind::kda);
            std::vector<int> seen(size_t(c.num_layers), 0);
            auto mark = [&](const std::vector<int>& list, const char* key, LayerKind kind) {
                for (int l1 : list) {
                    if (seen[size_t(l1 - 1)]++)
                        la->fail(key, fmt::format("layer {} is listed twice (in kda_layers and full_attn_layers, or "
                                                  "repeated)", l1));
                    c.layer_kinds[size_t(l1 - 1)] = kind;
                }
            };
            mark(kda, "kda_layers", LayerKind::kda);
            mark(full, "full_attn_layers", LayerKind::mla);
            for (int l = 0; l < c.num_layers; ++l)
                if (!seen[size_t(l)])
                    la->fail("kda_layers",
                             fmt::format("layer {} (1-based) is in neither kda_layers nor full_attn_layers", l + 1));
        }
        if (types) {
            std::vector<LayerKind> kinds = layer_types(f, "layer_types", c.num_layers);
            for (int l = 0; la_json && l < c.num_layers; ++l)
                if (kinds[size_t(l)] != c.layer_kinds[size_t(l)])
                    f.fail(fmt::format("layer_types[{}]", l),
                           fmt::format("'{}' disagrees with linear_attn_config, which makes layer {} (1-based) {}",
                                       (*types)[size_t(l)].get<std::string>(), l + 1,
                                       c.layer_kinds[size_t(l)] == LayerKind::kda ? "KDA" : "MLA"));
            c.layer_kinds = std::move(kinds);
        }
        const bool any_kda = std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::kda) > 0;
        // linear_attn_config.<key> and/or transformers' flat <hf_key>.
        auto kda_dim = [&](const char* key, const char* hf_key, int fallback, bool required) {
            std::optional<int> a, b;
            if (la && la->find(key)) a = required ? la->positive_int(key) : la->nonneg_int(key);
            if (f.find(hf_key)) b = required ? f.positive_int(hf_key) : f.nonneg_int(hf_key);
            if (a && b && *a != *b)
                f.fail(hf_key, fmt::format("{} differs from linear_attn_config.{} = {}", *b, key, *a));
            if (a || b) return a ? *a : *b;
            if (required) la ? la->fail(key, "missing") : f.fail(hf_key, "missing");
            return fallback;
        };
        c.kda.num_heads = kda_dim("num_heads", "linear_num_heads", 0, any_kda);
        c.kda.head_dim = kda_dim("head_dim", "linear_head_dim", 0, any_kda);
        c.kda.conv_size = kda_dim("short_conv_kernel_size", "linear_conv_kernel_dim", 4, false);
        if (la) {
            c.kda.gate_lower_bound = la->optional_number("gate_lower_bound");
            c.kda.use_full_rank_gate = la->boolean("use_full_rank_gate", false);
            la->check_unknown(opts);
        }
    }

    // MLA.
    bool any_mla = std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::mla) > 0;
    if (any_mla) {
        c.mla.num_heads = f.positive_int("num_attention_heads");
        if (f.find("num_key_value_heads")) {
            int kv = f.positive_int("num_key_value_heads");
            if (kv != c.mla.num_heads)
                f.fail("num_key_value_heads", fmt::format("{} differs from num_attention_heads = {} (MLA has one KV head per query head)",
                                                           kv, c.mla.num_heads));
        }
        c.mla.q_lora_rank = f.optional_positive_int("q_lora_rank");
        c.mla.kv_lora_rank = f.positive_int("kv_lora_rank");
        c.mla.qk_nope_head_dim = f.positive_int("qk_nope_head_dim");
        c.mla.qk_rope_head_dim = f.nonneg_int("qk_rope_head_dim");
        c.mla.v_head_dim = f.positive_int("v_head_dim");
        if (f.find("qk_head_dim") && f.positive_int("qk_head_dim") != c.mla.qk_head_dim())  // transformers derives it
            f.fail("qk_head_dim", fmt::format("{} is not qk_nope_head_dim + qk_rope_head_dim = {}",
                                              f.positive_int("qk_head_dim"), c.mla.qk_head_dim()));
    } else {
        for (const char* k : {"num_attention_heads", "num_key_value_heads", "q_lora_rank", "kv_lora_rank",
                              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_head_dim"})
            f.find(k);
    }
    // transformers' Kimi-Linear MLA never rotates, whatever its (optional) mla_use_nope says.
    c.mla.use_nope = f.boolean("mla_use_nope", hf) || hf;
    c.mla.use_output_gate = f.boolean("mla_use_output_gate", false);

    // MoE. Dense layers come first: first_k_dense_replace (default 0, transformers 1) and/or mlp_layer_types.
    {
        std::optional<int> first_k;
        if (f.find("first_k_dense_replace")) first_k = f.nonneg_int("first_k_dense_replace");
        if (f.find("mlp_layer_types")) {
            const int dense = leading_dense_layers(f, "mlp_layer_types", c.num_layers);
            if (first_k && *first_k != dense)
                f.fail("first_k_dense_replace",
                       fmt::format("{} disagrees with mlp_layer_types, which starts with {} dense layer{}", *first_k,
                                   dense, dense == 1 ? "" : "s"));
            first_k = dense;
        }
        c.moe.first_k_dense_replace = first_k.value_or(hf ? 1 : 0);
    }
    if (c.moe.first_k_dense_replace > 0) c.intermediate_size = f.positive_int("intermediate_size");
    else c.intermediate_size = f.nonneg_int("intermediate_size", 0);
    if (c.moe.first_k_dense_replace < c.num_layers) {
        c.moe.num_experts = f.positive_int(f.pick("num_experts", "num_local_experts"));
        c.moe.top_k = f.positive_int(f.pick("num_experts_per_token", "num_experts_per_tok"));
        c.moe.moe_intermediate_size = f.positive_int("moe_intermediate_size");
    } else {
        c.moe.num_experts = f.nonneg_int(f.pick("num_experts", "num_local_experts"), 0);
        c.moe.top_k = f.nonneg_int(f.pick("num_experts_per_token", "num_experts_per_tok"), 0);
        c.moe.moe_intermediate_size = f.nonneg_int("moe_intermediate_size", 0);
    }
    c.moe.num_shared_experts = f.nonneg_int(f.pick("num_shared_experts", "n_shared_experts"), 0);
    c.moe.routed_expert_hidden_size = f.optional_positive_int("routed_expert_hidden_size");
    c.moe.latent_moe_use_norm = f.boolean("latent_moe_use_norm", false);
    if (int freq = f.nonneg_int("moe_layer_freq", 1); freq != 1)
        f.fail("moe_layer_freq", fmt::format("{} is not supported (every layer after first_k_dense_replace is MoE)", freq));
    if (int mtp = f.nonneg_int("num_nextn_predict_layers", 0); mtp != 0)
        f.fail("num_nextn_predict_layers", fmt::format("{} multi-token-prediction layers are not supported", mtp));

    auto& r = c.moe.router;
    std::string ract = f.optional_string("moe_router_activation_func").value_or("sigmoid");
    if (ract != "sigmoid")
        f.fail("moe_router_activation_func", fmt::format("'{}' is not supported (sigmoid only)", ract));
    r.activation = RouterActivation::sigmoid;
    std::string topk_method = f.optional_string("topk_method").value_or("noaux_tc");
    if (topk_method == "noaux_tc") r.use_correction_bias = true;
    else if (topk_method == "greedy") r.use_correction_bias = false;
    else f.fail("topk_method", fmt::format("'{}' is not supported (noaux_tc or greedy)", topk_method));
    r.renormalize = f.boolean(f.pick("moe_renormalize", "norm_topk_prob"), true);
    r.routed_scaling_factor = f.number("routed_scaling_factor", 1.0f);
    // transformers' router always applies its groups (it has no use_grouped_topk switch).
    bool grouped = f.boolean("use_grouped_topk", hf);
    r.num_expert_group = f.nonneg_int(f.pick("num_expert_group", "n_group"), 1);
    r.topk_group = f.nonneg_int("topk_group", 1);
    if (!grouped) r.num_expert_group = r.topk_group = 1;

    // Residual. transformers writes 0 for "no Attention Residuals".
    if (const json* v = f.find("attn_res_block_size"); v && hf && v->is_number() && v->get<double>() == 0.0)
        c.attn_res_block_size.reset();
    else
        c.attn_res_block_size = f.optional_positive_int("attn_res_block_size");
}

}  // namespace

int ModelConfig::num_kda_layers() const {
    return int(std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kda));
}
int ModelConfig::num_mla_layers() const {
    return int(std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::mla));
}

std::string_view layer_kind_name(LayerKind k) { return k == LayerKind::kda ? "kda" : "mla"; }

ModelConfig parse_config(const json& j, const ParseOptions& opts) {
    if (!j.is_object()) throw ConfigError("config: expected a JSON object");
    ModelConfig c;
    auto mt = j.find("model_type");
    if (mt == j.end() || !mt->is_string()) throw ConfigError("model_type: missing (kimi_k3 or kimi_linear expected)");
    c.model_type = mt->get<std::string>();

    const json* quant = nullptr;
    std::string quant_path;
    if (c.model_type == "kimi_k3") {
        c.layout = TensorLayout::k3;
        auto tc = j.find("text_config");
        if (tc == j.end() || !tc->is_object()) throw ConfigError("text_config: missing (kimi_k3 nests the decoder config)");
        Fields f(*tc, "text_config.");
        std::string inner = f.optional_string("model_type").value_or("");
        if (inner != "kimi_linear")
            f.fail("model_type", fmt::format("'{}' is not supported (kimi_linear expected)", inner));
        parse_text_config(c, f, opts);
        if (auto it = tc->find("quantization_config"); it != tc->end() && !it->is_null()) {
            quant = &*it;
            quant_path = "text_config.quantization_config.";
        }
        f.find("quantization_config");
        f.check_unknown(opts);
        // Special ids on the wrapper win over the decoder's.
        Fields top(j, "");
        if (auto v = top.optional_token_id("bos_token_id")) c.bos_token_id = v;
        if (auto v = top.optional_token_id("pad_token_id")) c.pad_token_id = v;
        if (auto ids = top.optional_token_ids("eos_token_id")) c.eos_token_ids = std::move(*ids);
        if (const json* v = top.find("tie_word_embeddings")) {
            if (!v->is_boolean()) top.fail("tie_word_embeddings", "expected true or false");
            c.tie_word_embeddings = c.tie_word_embeddings || v->get<bool>();
        }
    } else if (c.model_type == "kimi_linear") {
        c.layout = TensorLayout::kimi_linear;
        Fields f(j, "");
        f.find("model_type");
        parse_text_config(c, f, opts);
        f.find("quantization_config");
        f.check_unknown(opts);
    } else {
        throw ConfigError(fmt::format("model_type: '{}' is not supported (kimi_k3 or kimi_linear)", c.model_type));
    }
    if (auto it = j.find("quantization_config"); it != j.end() && !it->is_null()) {
        quant = &*it;
        quant_path = "quantization_config.";
    }
    c.expert_format = quant ? parse_quantization(*quant, quant_path) : ExpertFormat::bf16;
    validate(c, text_prefix(c));
    return c;
}

ModelConfig load_config(const std::filesystem::path& dir_or_file, const ParseOptions& opts) {
    std::filesystem::path file = dir_or_file;
    if (std::filesystem::is_directory(file)) file /= "config.json";
    std::ifstream in(file, std::ios::binary);
    if (!in) throw IoError(fmt::format("{}: cannot open", file.string()));
    std::stringstream ss;
    ss << in.rdbuf();
    json j;
    try {
        j = json::parse(ss.str());
    } catch (const json::parse_error& e) {
        throw ConfigError(fmt::format("{}: not valid JSON ({})", file.string(), e.what()));
    }
    try {
        return parse_config(j, opts);
    } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("{}: {}", file.string(), e.what()));
    }
}

void validate_config(const ModelConfig& c) { validate(c, text_prefix(c)); }

json to_json(const ModelConfig& c) {
    json t = json::object();
    t["model_type"] = "kimi_linear";
    t["architectures"] = json::array({"KimiLinearForCausalLM"});
    t["hidden_size"] = c.hidden_size;
    t["num_hidden_layers"] = c.num_layers;
    t["vocab_size"] = c.vocab_size;
    t["rms_norm_eps"] = num(c.rms_norm_eps);
    t["tie_word_embeddings"] = c.tie_word_embeddings;
    const bool hf = c.dialect == ConfigDialect::transformers;
    if (c.max_position_embeddings > 0)
        t[hf ? "model_max_length" : "max_position_embeddings"] = c.max_position_embeddings;
    if (c.bos_token_id) t["bos_token_id"] = *c.bos_token_id;
    if (c.eos_token_ids.size() == 1) t["eos_token_id"] = c.eos_token_ids[0];
    else if (!c.eos_token_ids.empty()) t["eos_token_id"] = c.eos_token_ids;
    if (c.pad_token_id) t["pad_token_id"] = *c.pad_token_id;
    t["hidden_act"] = c.hidden_act == Activation::situ ? "situ" : "silu";
    if (c.hidden_act == Activation::situ) {
        t["activation_situ_beta"] = num(c.situ_beta);
        t["activation_situ_linear_beta"] = c.situ_linear_beta ? num(*c.situ_linear_beta) : json(nullptr);
    }

    json la = json::object();
    std::vector<int> kda, full;
    for (int l = 0; l < int(c.layer_kinds.size()); ++l)
        (c.layer_kinds[size_t(l)] == LayerKind::kda ? kda : full).push_back(l + 1);
    la["kda_layers"] = kda;
    la["full_attn_layers"] = full;
    la["num_heads"] = c.kda.num_heads;
    la["head_dim"] = c.kda.head_dim;
    la["short_conv_kernel_size"] = c.kda.conv_size;
    if (c.kda.gate_lower_bound) la["gate_lower_bound"] = num(*c.kda.gate_lower_bound);
    la["use_full_rank_gate"] = c.kda.use_full_rank_gate;
    if (!hf) {
        t["linear_attn_config"] = la;
    } else {
        json types = json::array(), mlp_types = json::array();
        for (int l = 0; l < c.num_layers; ++l) {
            types.push_back(c.is_kda(l) ? "linear_attention" : "full_attention");
            mlp_types.push_back(c.is_moe(l) ? "sparse" : "dense");
        }
        t["layer_types"] = types;
        t["mlp_layer_types"] = mlp_types;
        t["linear_num_heads"] = c.kda.num_heads;
        t["linear_head_dim"] = c.kda.head_dim;
        t["linear_conv_kernel_dim"] = c.kda.conv_size;
        // transformers has no fields for K3's KDA gates; a re-saved Moonshot config keeps them here.
        if (c.kda.gate_lower_bound || c.kda.use_full_rank_gate) t["linear_attn_config"] = la;
    }

    t["num_attention_heads"] = c.mla.num_heads;
    t["num_key_value_heads"] = c.mla.num_heads;
    t["q_lora_rank"] = c.mla.q_lora_rank ? json(*c.mla.q_lora_rank) : json(nullptr);
    t["kv_lora_rank"] = c.mla.kv_lora_rank;
    t["qk_nope_head_dim"] = c.mla.qk_nope_head_dim;
    t["qk_rope_head_dim"] = c.mla.qk_rope_head_dim;
    t["v_head_dim"] = c.mla.v_head_dim;
    if (hf) {
        t["qk_head_dim"] = c.mla.qk_head_dim();
        t["head_dim"] = c.mla.qk_rope_head_dim;
    } else {
        t["mla_use_nope"] = c.mla.use_nope;
    }
    t["mla_use_output_gate"] = c.mla.use_output_gate;

    if (!hf) t["first_k_dense_replace"] = c.moe.first_k_dense_replace;
    t["intermediate_size"] = c.intermediate_size;
    t["num_experts"] = c.moe.num_experts;
    t["num_experts_per_token"] = c.moe.top_k;
    t["num_shared_experts"] = c.moe.num_shared_experts;
    t["moe_intermediate_size"] = c.moe.moe_intermediate_size;
    if (c.moe.routed_expert_hidden_size) t["routed_expert_hidden_size"] = *c.moe.routed_expert_hidden_size;
    if (!hf || c.moe.latent_moe_use_norm) t["latent_moe_use_norm"] = c.moe.latent_moe_use_norm;
    if (!hf) {
        t["moe_layer_freq"] = 1;
        t["moe_router_activation_func"] = "sigmoid";
    }
    if (!hf || !c.moe.router.use_correction_bias)
        t["topk_method"] = c.moe.router.use_correction_bias ? "noaux_tc" : "greedy";
    t["moe_renormalize"] = c.moe.router.renormalize;
    t["routed_scaling_factor"] = num(c.moe.router.routed_scaling_factor);
    if (!hf) t["use_grouped_topk"] = c.moe.router.num_expert_group > 1;
    t["num_expert_group"] = c.moe.router.num_expert_group;
    t["topk_group"] = c.moe.router.topk_group;
    if (!hf) t["num_nextn_predict_layers"] = 0;
    if (c.attn_res_block_size) t["attn_res_block_size"] = *c.attn_res_block_size;
    else if (hf) t["attn_res_block_size"] = 0;
    t["torch_dtype"] = "bfloat16";

    json quant = nullptr;
    if (c.expert_format != ExpertFormat::bf16) {
        bool mx = c.expert_format == ExpertFormat::mxfp4_g32;
        json weights = {{"num_bits", 4}, {"type", mx ? "float" : "int"}, {"strategy", "group"},
                        {"group_size", kExpertGroupSize}, {"symmetric", true}, {"dynamic", false}};
        std::string format = mx ? "mxfp4-pack-quantized" : "pack-quantized";
        std::string prefix = c.layout == TensorLayout::k3 ? "language_model." : "";
        quant = {
            {"quant_method", "compressed-tensors"},
            {"format", format},
            {"quantization_status", "compressed"},
            {"config_groups", {{"group_0", {{"targets", json::array({"Linear"})}, {"weights", weights}, {"format", format}}}}},
            {"ignore", json::array({prefix + "lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\..*",
                                    "re:.*block_sparse_moe\\.gate$", "re:.*routed_expert_(down|up)_proj$"})},
        };
        if (hf) quant["ignore"].push_back("re:.*block_sparse_moe\\.(gate|up|down)_proj$");  // the dense MLP
    }

    if (c.layout == TensorLayout::kimi_linear) {
        if (!quant.is_null()) t["quantization_config"] = quant;
        return t;
    }
    json top = json::object();
    top["model_type"] = "kimi_k3";
    top["architectures"] = json::array({"KimiK3ForConditionalGeneration"});
    if (c.bos_token_id) top["bos_token_id"] = *c.bos_token_id;
    if (c.eos_token_ids.size() == 1) top["eos_token_id"] = c.eos_token_ids[0];
    else if (!c.eos_token_ids.empty()) top["eos_token_id"] = c.eos_token_ids;
    if (c.pad_token_id) top["pad_token_id"] = *c.pad_token_id;
    top["tie_word_embeddings"] = c.tie_word_embeddings;
    top["text_config"] = t;
    if (!quant.is_null()) top["quantization_config"] = quant;
    return top;
}

}  // namespace kiln::model
