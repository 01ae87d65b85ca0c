#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/checkpoint.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "model/reference/forward.hpp"
#include "model/reference/generate.hpp"
#include "model/safetensors.hpp"
#include "model_test_util.hpp"
#include "reference_test_util.hpp"
#include "runtime/error.hpp"
#include "tests/common/sandbox.hpp"

using namespace kiln::model;
using namespace kiln::model::reference;
using kiln_test::Rng;

namespace {

namespace fs = std::filesystem;

using kiln::test::TempDir;

std::unique_ptr<ReferenceModel> build(const ModelConfig& c, uint64_t seed = kDefaultModelSeed) {
    TempDir dir("model");
    MakeModelOptions opts;
    opts.seed = seed;
    write_model(c, dir.path, opts);
    Checkpoint ck = Checkpoint::open(dir.path);
    return std::make_unique<ReferenceModel>(c, ck);
}

bool all_finite(const Matrix& m) {
    return std::all_of(m.data.begin(), m.data.end(), [](float v) { return std::isfinite(v); });
}

std::vector<uint32_t> random_ids(size_t n, size_t vocab, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<uint32_t> ids(n);
    for (auto& id : ids) id = uint32_t(g() % vocab);
    return ids;
}

// Runs `ids` through a fresh request in calls of `step` tokens; returns all logits.
Matrix run_in_steps(const ReferenceModel& m, std::span<const uint32_t> ids, size_t step, const ForwardOptions& o = {}) {
    RequestState st = m.new_request();
    Matrix out = kiln_test::poisoned(ids.size(), m.vocab_size());
    for (size_t b = 0; b < ids.size(); b += step) {
        size_t e = std::min(ids.size(), b + step);
        Matrix part = m.forward(st, ids.subspan(b, e - b), o);
        std::copy(part.data.begin(), part.data.end(), out.row(b));
    }
    CHECK(st.position() == ids.size());
    return out;
}

// The Kimi-Linear-48B form at k3-tiny widths: softplus gate, low-rank KDA gate, plain q_proj, no MLA
// output gate, experts on the hidden state (no latent), SiLU, no AttnRes, scaled router.
ModelConfig kimi_linear_tiny() {
    ModelConfig c = k3_tiny_config(ExpertFormat::bf16);
    c.model_type = "kimi_linear";
    c.layout = TensorLayout::kimi_linear;
    c.hidden_act = Activation::silu;
    c.kda.gate_lower_bound.reset();
    c.kda.use_full_rank_gate = false;
    c.mla.q_lora_rank.reset();
    c.mla.use_output_gate = false;
    c.moe.routed_expert_hidden_size.reset();
    c.moe.latent_moe_use_norm = false;
    c.moe.router.routed_scaling_factor = 2.446f;
    c.attn_res_block_size.reset();
    validate_config(c);
    return c;
}

void check_consistency(const ReferenceModel& m, size_t T, double tol) {
    std::vector<uint32_t> ids = random_ids(T, m.vocab_size(), 99);
    Matrix whole = run_in_steps(m, ids, T);
    REQUIRE(all_finite(whole));
    // Logits vary across the vocabulary (not a degenerate model).
    double mn = *std::min_element(whole.data.begin(), whole.data.end());
    double mx = *std::max_element(whole.data.begin(), whole.data.end());
    CHECK(mx - mn > 1.0);
    for (size_t step : {size_t(1), size_t(3), size_t(17), size_t(64)}) {
        CAPTURE(step);
        CHECK(kiln_test::rel_err(run_in_steps(m, ids, step), whole) < tol);
    }
    // The same whole-prompt call pinned to the other evaluations of KDA and MLA.
    ForwardOptions rec{KdaMode::recurrent, MlaMode::absorbed};
    CHECK(kiln_test::rel_err(run_in_steps(m, ids, T, rec), whole) < tol);
    ForwardOptions chunk_step{KdaMode::chunked, MlaMode::plain};
    CHECK(kiln_test::rel_err(run_in_steps(m, ids, 1, chunk_step), whole) < tol);
}

}  // namespace

TEST_CASE("k3-tiny: prefill whole, in chunks of any size, or token by token gives the same logits") {
    auto m = build(k3_tiny_config());
    check_consistency(*m, 150, 2e-5);  // crosses two 64-token KDA chunks
}

TEST_CASE("Kimi-Linear-48B form: the same equivalence") {
    auto m = build(kimi_linear_tiny());
    check_consistency(*m, 80, 2e-5);
}

TEST_CASE("k3-tiny loads and runs with bf16, INT4 and MXFP4 experts") {
    std::vector<uint32_t> ids = random_ids(12, 4096, 5);
    Matrix ref;
    for (ExpertFormat f : {ExpertFormat::bf16, ExpertFormat::int4_g32, ExpertFormat::mxfp4_g32}) {
        CAPTURE(expert_format_name(f));
        auto m = build(k3_tiny_config(f));
        Matrix logits = run_in_steps(*m, ids, ids.size());
        REQUIRE(all_finite(logits));
        // Same seed, same fp32 draws: the 4-bit formats perturb the experts, so the logits move.
        if (f == ExpertFormat::bf16) ref = logits;
        else CHECK(kiln_test::rel_err(logits, ref) > 1e-3);
    }
}

TEST_CASE("bad token ids are refused and leave the request state untouched") {
    auto m = build(k3_tiny_config());
    std::vector<uint32_t> ids = random_ids(6, m->vocab_size(), 3);
    RequestState st = m->new_request();
    m->forward(st, std::span(ids).subspan(0, 3));
    std::vector<uint32_t> bad{ids[3], uint32_t(m->vocab_size())};
    CHECK_THROWS_AS(m->forward(st, bad), kiln::InvalidArgument);
    CHECK(st.position() == 3);
    Matrix rest = m->forward(st, std::span(ids).subspan(3));
    Matrix whole = run_in_steps(*m, ids, ids.size());
    CHECK(kiln_test::rel_err(rest, kiln_test::rows(whole, 3, 6)) < 2e-5);
    CHECK(m->forward(st, std::span<const uint32_t>()).rows == 0);
}

TEST_CASE("request state holds the KDA conv + fp32 recurrent state and the MLA latent cache") {
    ModelConfig c = k3_tiny_config();
    auto m = build(c);
    RequestState st = m->new_request();
    const size_t hk = size_t(c.kda.inner_dim()), K = size_t(c.kda.head_dim), H = size_t(c.kda.num_heads);
    const size_t kda_bytes = size_t(c.num_kda_layers()) * (H * K * K + 3 * size_t(c.kda.conv_size - 1) * hk) * 4;
    CHECK(st.bytes() == kda_bytes);
    std::vector<uint32_t> ids = random_ids(5, m->vocab_size(), 4);
    m->forward(st, ids);
    CHECK(st.bytes() == kda_bytes + size_t(c.num_mla_layers()) * 5 * size_t(c.mla.cache_dim()) * 4);
}

namespace {

// Overwrites `bytes.size()` bytes of tensor `name` (stored as `dtype`), `offset` bytes into it, in the
// checkpoint's shards (test-only surgery on a copy).
void patch_tensor(const fs::path& dir, const std::string& name, const char* dtype, size_t offset,
                  std::string_view bytes) {
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".safetensors") continue;
        std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
        uint64_t n = 0;
        f.read(reinterpret_cast<char*>(&n), 8);
        std::string header(n, '\0');
        f.read(header.data(), std::streamsize(n));
        auto j = nlohmann::json::parse(header);
        if (!j.contains(name)) continue;
        REQUIRE(j[name]["dtype"] == dtype);
        uint64_t begin = j[name]["data_offsets"][0];
        uint64_t end = j[name]["data_offsets"][1];
        REQUIRE(offset + bytes.size() <= end - begin);
        f.seekp(std::streamoff(8 + n + begin + offset));
        f.write(bytes.data(), std::streamsize(bytes.size()));
        return;
    }
    FAIL("tensor not found: " << name);
}

void patch_f32_tensor(const fs::path& dir, const std::string& name, const std::vector<float>& values) {
    patch_tensor(dir, name, "F32", 0,
                 std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 4));
}

}  // namespace

TEST_CASE("A_log is read per head from its first H entries of the checkpoint") {
    // k3-tiny stores A_log as [max(H, head_dim)] = [32] for 4 heads, like K3's [128] for 96 heads.
    ModelConfig c = k3_tiny_config(ExpertFormat::bf16);
    const size_t H = size_t(c.kda.num_heads);
    TempDir dir("alog");
    write_model(c, dir.path);
    const std::string name = TensorNames(c).layer(1, "self_attn.A_log");
    std::vector<float> a_log;
    {
        Checkpoint ck = Checkpoint::open(dir.path);
        a_log = to_fp32(ck.get(name));
    }
    REQUIRE(a_log.size() > H);
    std::vector<uint32_t> ids = random_ids(20, size_t(c.vocab_size), 8);
    auto logits = [&] {
        Checkpoint ck = Checkpoint::open(dir.path);
        ReferenceModel m(c, ck);
        return run_in_steps(m, ids, ids.size());
    };
    Matrix base = logits();
    // Entries past H (the padding) must not matter...
    std::vector<float> padded = a_log;
    for (size_t i = H; i < padded.size(); ++i) padded[i] = 2.5f + 0.1f * float(i);
    patch_f32_tensor(dir.path, name, padded);
    CHECK(kiln_test::rel_err(logits(), base) == 0.0);
    // ...while a per-head entry does.
    padded[1] += 1.0f;
    patch_f32_tensor(dir.path, name, padded);
    CHECK(kiln_test::rel_err(logits(), base) > 1e-4);
}

TEST_CASE("generate: greedy is deterministic and follows the argmax of the logits") {
    auto m = build(k3_tiny_config());
    std::vector<uint32_t> prompt = random_ids(7, m->vocab_size(), 12);
    std::vector<uint32_t> streamed;
    GenerateResult a = generate(*m, prompt, 10, SamplingParams{}, {}, [&](uint32_t id) { streamed.push_back(id); });
    GenerateResult b = generate(*m, prompt, 10, SamplingParams{}, {});
    REQUIRE(a.ids.size() == 10);
    CHECK(a.ids == b.ids);
    CHECK(streamed == a.ids);
    // Each greedy id is the argmax of the logits of the sequence so far.
    std::vector<uint32_t> seq = prompt;
    for (uint32_t id : a.ids) {
        Matrix l = run_in_steps(*m, seq, seq.size());
        const float* last = l.row(l.rows - 1);
        CHECK(id == uint32_t(std::max_element(last, last + l.cols) - last));
        seq.push_back(id);
    }
    // A stop id ends generation (and is reported).
    GenerateResult c = generate(*m, prompt, 10, SamplingParams{}, std::vector<uint32_t>{a.ids[2]});
    CHECK(c.stopped);
    CHECK(c.ids.size() <= 3);
    // Sampling: same seed, same ids.
    SamplingParams s{0.8f, 0.9f, 77};
    CHECK(generate(*m, prompt, 10, s, {}).ids == generate(*m, prompt, 10, s, {}).ids);
}

TEST_CASE("generation stops at max_position_embeddings as vLLM does; forward never runs past it") {
    ModelConfig c = k3_tiny_config();
    auto unlimited = build(c);
    c.max_position_embeddings = 8;
    auto m = build(c);
    const std::vector<uint32_t> prompt = random_ids(5, m->vocab_size(), 21);
    const GenerateResult full = generate(*unlimited, prompt, 10, SamplingParams{}, {});
    REQUIRE(full.ids.size() == 10);

    // 5 prompt tokens + 3 generated fill the 8 positions: finish "length", the same ids as without a limit.
    GenerateResult r = generate(*m, prompt, 100, SamplingParams{}, {});
    CHECK(r.ids == std::vector<uint32_t>(full.ids.begin(), full.ids.begin() + 3));
    CHECK(r.context_full);
    CHECK_FALSE(r.stopped);
    CHECK(r.finish_reason() == "length");
    // max_tokens reached first: not the context.
    r = generate(*m, prompt, 2, SamplingParams{}, {});
    CHECK(r.ids.size() == 2);
    CHECK_FALSE(r.context_full);
    // A prompt that fills the context still yields the one token its last logits choose.
    const std::vector<uint32_t> long_prompt = random_ids(8, m->vocab_size(), 22);
    r = generate(*m, long_prompt, 100, SamplingParams{}, {});
    CHECK(r.ids.size() == 1);
    CHECK(r.context_full);
    // A longer prompt is refused before any work.
    const std::vector<uint32_t> too_long = random_ids(9, m->vocab_size(), 23);
    CHECK_THROWS_WITH_AS(generate(*m, too_long, 4, SamplingParams{}, {}),
                         doctest::Contains("the prompt has 9 tokens, more than the model's context of 8"),
                         kiln::InvalidArgument);

    RequestState st = m->new_request();
    m->forward(st, std::span(long_prompt).subspan(0, 7));
    std::vector<uint32_t> two{long_prompt[7], long_prompt[7]};
    CHECK_THROWS_WITH_AS(m->forward(st, two), doctest::Contains("would run past the model's context of 8"),
                         kiln::InvalidArgument);
    CHECK(st.position() == 7);
    CHECK(m->forward(st, std::span(long_prompt).subspan(7)).rows == 1);
    CHECK_THROWS_AS(m->forward(st, std::span(long_prompt).subspan(7)), kiln::InvalidArgument);
    CHECK(st.position() == 8);
}

TEST_CASE("generation stops with a clear error when the logits turn non-finite") {
    ModelConfig c = k3_tiny_config(ExpertFormat::bf16);
    TempDir dir("nonfinite");
    write_model(c, dir.path);
    const std::vector<uint32_t> prompt = random_ids(6, size_t(c.vocab_size), 31);
    uint32_t first = 0;
    {
        Checkpoint ck = Checkpoint::open(dir.path);
        ReferenceModel m(c, ck);
        first = generate(m, prompt, 1, SamplingParams{}, {}).ids.at(0);
    }
    REQUIRE(std::find(prompt.begin(), prompt.end(), first) == prompt.end());
    // A NaN in the embedding of the first generated token: the prompt's logits are fine, the next ones are not.
    const uint16_t nan_bf16 = 0x7FC0;
    patch_tensor(dir.path, TensorNames(c).embed_tokens(), "BF16", size_t(first) * size_t(c.hidden_size) * 2 + 6,
                 std::string_view(reinterpret_cast<const char*>(&nan_bf16), 2));
    Checkpoint ck = Checkpoint::open(dir.path);
    ReferenceModel m(c, ck);
    std::vector<uint32_t> streamed;
    CHECK_THROWS_WITH_AS(generate(m, prompt, 10, SamplingParams{}, {}, [&](uint32_t id) { streamed.push_back(id); }),
                         doctest::Contains("logits at position 6 are not finite (4096 of 4096 values NaN or "
                                           "infinite, the first at id 0: nan); 1 token had been generated"),
                         NonFiniteLogits);
    CHECK(streamed == std::vector<uint32_t>{first});
    // A prompt that holds the token fails on its own logits, before anything is generated.
    std::vector<uint32_t> with_nan = prompt;
    with_nan.push_back(first);
    CHECK_THROWS_WITH_AS(generate(m, with_nan, 10, SamplingParams{0.7f, 1.0f, 3}, {}),
                         doctest::Contains("0 tokens had been generated"), NonFiniteLogits);
}

namespace {

// Re-saves the checkpoint in `from` into `to` the way another writer would: the same tensor bytes under the
// names `rename` gives, the index rewritten to match, and `config` as config.json.
void resave(const fs::path& from, const fs::path& to, const nlohmann::json& config,
            const std::function<std::string(const std::string&)>& rename) {
    fs::create_directories(to);
    for (const auto& entry : fs::directory_iterator(from)) {
        if (entry.path().extension() != ".safetensors") continue;
        auto file = SafetensorsFile::open(entry.path());
        std::vector<TensorDecl> decls;
        for (const auto& t : file->tensors()) decls.push_back({rename(t.name), t.dtype, t.shape});
        SafetensorsWriter w(to / entry.path().filename(), decls);
        for (const auto& t : file->tensors()) w.write(rename(t.name), t.bytes);
        w.finish();
    }
    nlohmann::json index = kiln::model::test::read_json(from / "model.safetensors.index.json");
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [name, shard] : index["weight_map"].items()) map[rename(name)] = shard;
    index["weight_map"] = map;
    kiln::model::test::write_file(to / "model.safetensors.index.json", index.dump(2));
    kiln::model::test::write_file(to / "config.json", config.dump(2));
}

// A Moonshot-dialect Kimi-Linear config.json rewritten as transformers 5.x's KimiLinearConfig saves it:
// per-layer type lists for linear_attn_config, flat linear_* dims, no mla_use_nope and no
// first_k_dense_replace (its default, 1, applies), model_max_length, and no keys transformers does not know.
nlohmann::json as_transformers_saves(nlohmann::json j) {
    const nlohmann::json la = j["linear_attn_config"];
    const int layers = j["num_hidden_layers"];
    nlohmann::json types = nlohmann::json::array();
    for (int l = 1; l <= layers; ++l) {
        const auto& full = la["full_attn_layers"];
        types.push_back(std::find(full.begin(), full.end(), l) != full.end() ? "full_attention" : "linear_attention");
    }
    REQUIRE(j["first_k_dense_replace"] == 1);
    j["layer_types"] = types;
    j["linear_num_heads"] = la["num_heads"];
    j["linear_head_dim"] = la["head_dim"];
    j["linear_conv_kernel_dim"] = la["short_conv_kernel_size"];
    j["qk_head_dim"] = j["qk_nope_head_dim"].get<int>() + j["qk_rope_head_dim"].get<int>();
    if (j.contains("max_position_embeddings")) j["model_max_length"] = j["max_position_embeddings"];
    for (const char* k : {"linear_attn_config", "mla_use_nope", "first_k_dense_replace", "max_position_embeddings",
                          "use_grouped_topk", "moe_layer_freq", "num_nextn_predict_layers",
                          "moe_router_activation_func", "topk_method", "torch_dtype"})
        j.erase(k);
    j["dtype"] = "bfloat16";
    j["transformers_version"] = "5.0.0";
    return j;
}

}  // namespace

TEST_CASE("a Kimi-Linear checkpoint saved by transformers 5.x loads and computes what the Moonshot layout does") {
    const ModelConfig moon = kimi_linear_tiny();
    TempDir root("transformers");
    const fs::path moon_dir = root.path / "moonshot", hf_dir = root.path / "transformers";
    write_model(moon, moon_dir);
    const nlohmann::json hf_json = as_transformers_saves(to_json(moon));
    // save_pretrained maps every layer's `mlp` back to `block_sparse_moe`, the dense layer 0 included.
    const std::string dense = "model.layers.0.mlp.", renamed = "model.layers.0.block_sparse_moe.";
    auto rename = [&](const std::string& n) { return n.starts_with(dense) ? renamed + n.substr(dense.size()) : n; };
    resave(moon_dir, hf_dir, hf_json, rename);

    ModelFiles files = open_model(hf_dir);
    CHECK(files.config.dialect == ConfigDialect::transformers);
    CHECK(files.config.moe.first_k_dense_replace == 1);
    CHECK(files.checkpoint.find("model.layers.0.block_sparse_moe.gate_proj.weight") != nullptr);
    CHECK(files.checkpoint.find("model.layers.0.mlp.gate_proj.weight") == nullptr);
    ReferenceModel hf(files.config, files.checkpoint);
    Checkpoint moon_ck = Checkpoint::open(moon_dir);
    ReferenceModel reference(moon, moon_ck);
    // Same weights, same math (MLA latent norms at eps 1e-6 in both): identical logits, prefill and decode.
    const std::vector<uint32_t> ids = random_ids(70, size_t(moon.vocab_size), 41);
    const Matrix expected = run_in_steps(reference, ids, ids.size());
    REQUIRE(all_finite(expected));
    CHECK(kiln_test::rel_err(run_in_steps(hf, ids, ids.size()), expected) == 0.0);
    CHECK(kiln_test::rel_err(run_in_steps(hf, ids, 1), run_in_steps(reference, ids, 1)) == 0.0);
    CHECK(generate(hf, ids, 6, SamplingParams{}, {}).ids == generate(reference, ids, 6, SamplingParams{}, {}).ids);

    // The transformers config with Moonshot's tensor names is refused, naming both sides.
    const fs::path mixed = root.path / "mixed";
    resave(moon_dir, mixed, hf_json, [](const std::string& n) { return n; });
    try {
        open_model(mixed);
        FAIL("accepted a transformers config over Moonshot tensor names");
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        CHECK(msg.find("3 missing: model.layers.0.block_sparse_moe.gate_proj.weight") != std::string::npos);
        CHECK(msg.find("unexpected: model.layers.0.mlp.") != std::string::npos);
    }
    // make-model writes the transformers dialect too, and it loads back.
    const fs::path made = root.path / "made";
    write_model(files.config, made);
    CHECK(open_model(made).config.dialect == ConfigDialect::transformers);
}

TEST_CASE("MLA latent norms: eps 1e-6 in Kimi-Linear (Moonshot's and transformers' code), rms_norm_eps in K3") {
    ModelConfig linear = kimi_linear_tiny();
    REQUIRE(linear.rms_norm_eps == 1e-5f);
    CHECK(mla_dims(linear).norm_eps == 1e-6f);
    linear.dialect = ConfigDialect::transformers;
    CHECK(mla_dims(linear).norm_eps == 1e-6f);
    ModelConfig k3 = k3_tiny_config();
    k3.rms_norm_eps = 3e-5f;
    CHECK(mla_dims(k3).norm_eps == 3e-5f);
    CHECK(kda_dims(linear).norm_eps == 1e-5f);  // the KDA output norm keeps rms_norm_eps
}

TEST_CASE("grouped top-k routing is refused with a clear message") {
    ModelConfig c = k3_tiny_config();
    TempDir dir("group");
    write_model(c, dir.path);
    Checkpoint ck = Checkpoint::open(dir.path);
    c.moe.router.num_expert_group = 2;
    c.moe.router.topk_group = 1;
    CHECK_THROWS_WITH_AS(ReferenceModel(c, ck), doctest::Contains("grouped top-k"), kiln::InvalidArgument);
}
