// Checkpoints: make-model → loader round trip for every expert format, shard handling, and validation
// errors that list missing, unexpected and mismatched tensors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/checkpoint.hpp"
#include "model/dtype.hpp"
#include "runtime/bf16.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "model_test_util.hpp"

using namespace kiln::model;
namespace runtime = kiln::runtime;
using kiln::model::test::read_file;
using kiln::model::test::read_json;
using kiln::model::test::ScratchDir;
using kiln::model::test::write_file;

namespace {

struct OwnedTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
};

// Copies `src` into dst/model.safetensors (one file) after `mutate` edits the tensor list, plus config.json.
void rewrite(const std::filesystem::path& src, const std::filesystem::path& dst,
             const std::function<void(std::vector<OwnedTensor>&)>& mutate) {
    Checkpoint ck = Checkpoint::open(src);
    std::vector<OwnedTensor> ts;
    for (const auto& [name, t] : ck.tensors())
        ts.push_back({name, t->dtype, t->shape, std::vector<std::byte>(t->bytes.begin(), t->bytes.end())});
    mutate(ts);
    std::vector<TensorDecl> decls;
    for (const auto& t : ts) decls.push_back({t.name, t.dtype, t.shape});
    std::filesystem::create_directories(dst);
    SafetensorsWriter w(dst / "model.safetensors", decls);
    for (const auto& t : ts) w.write(t.name, t.bytes);
    w.finish();
    std::filesystem::copy_file(src / "config.json", dst / "config.json");
}

OwnedTensor& find(std::vector<OwnedTensor>& ts, const std::string& name) {
    for (auto& t : ts)
        if (t.name == name) return t;
    FAIL("no tensor ", name);
    throw 0;
}

std::string validation_error(const std::filesystem::path& dir) {
    try {
        open_model(dir);
    } catch (const CheckpointError& e) {
        return e.what();
    }
    return "";
}

// A k3-tiny checkpoint generated once per process and format; tests that edit it work on a copy.
const std::filesystem::path& tiny(ExpertFormat fmt, uint64_t max_shard_bytes) {
    static std::map<std::pair<int, uint64_t>, std::unique_ptr<ScratchDir>> made;
    auto& slot = made[{int(fmt), max_shard_bytes}];
    if (!slot) {
        slot = std::make_unique<ScratchDir>("tiny");
        MakeModelOptions opts;
        opts.max_shard_bytes = max_shard_bytes;
        opts.replace = true;
        write_model(k3_tiny_config(fmt), slot->path(), opts);
    }
    return slot->path();
}

void copy_dir(const std::filesystem::path& from, const std::filesystem::path& to) {
    for (const auto& e : std::filesystem::directory_iterator(from))
        std::filesystem::copy_file(e.path(), to / e.path().filename(), std::filesystem::copy_options::overwrite_existing);
}

double rel_rms(const std::vector<float>& want, const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += double(want[i] - got[i]) * double(want[i] - got[i]);
        den += double(want[i]) * double(want[i]);
    }
    return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("k3-tiny round trip through make-model and the loader, for every expert format") {
    for (ExpertFormat fmt : {ExpertFormat::mxfp4_g32, ExpertFormat::int4_g32, ExpertFormat::bf16}) {
        INFO("expert format ", expert_format_name(fmt));
        const ModelConfig c = k3_tiny_config(fmt);
        ModelFiles m = open_model(tiny(fmt, 1 << 20));  // several shards
        CHECK(to_json(m.config) == to_json(c));
        CHECK(m.checkpoint.shards().size() > 3);
        CHECK(m.checkpoint.size() == expected_tensors(c).size());

        const TensorNames names(c);
        // K3 layout names, lm_head beside model.
        CHECK(m.checkpoint.find("language_model.lm_head.weight") != nullptr);
        CHECK(m.checkpoint.find("language_model.model.layers.3.self_attn.kv_a_proj_with_mqa.weight") != nullptr);
        CHECK(m.checkpoint.find("language_model.model.layers.4.self_attn.A_log") != nullptr);
        CHECK(m.checkpoint.find("language_model.model.layers.0.mlp.gate_proj.weight") != nullptr);
        CHECK(m.checkpoint.find("language_model.model.layers.0.block_sparse_moe.gate.weight") == nullptr);

        double worst_rel = 0;
        for (const LogicalTensor& t : logical_tensors(c)) {
            const std::vector<float> want = random_weights(c, t);
            if (t.role != TensorRole::expert) {
                const std::vector<float> got = to_fp32(m.checkpoint.get(t.name));
                REQUIRE(got.size() == want.size());
                for (size_t i = 0; i < want.size(); ++i) {
                    float stored = t.dtype == DType::f32 ? want[i] : runtime::bf16_to_float(runtime::float_to_bf16(want[i]));
                    if (got[i] != stored) {
                        FAIL_CHECK(t.name, "[", i, "] = ", got[i], ", expected ", stored);
                        break;
                    }
                }
                continue;
            }
            std::vector<float> got = load_expert_fp32(m.checkpoint, c, t.layer, t.expert, t.proj);
            REQUIRE(got.size() == want.size());
            const int64_t cols = t.shape[1];
            for (size_t g = 0; g < want.size() / 32; ++g) {
                float amax = 0;
                for (size_t k = g * 32; k < g * 32 + 32; ++k) amax = std::max(amax, std::fabs(want[k]));
                for (size_t k = g * 32; k < g * 32 + 32; ++k) {
                    float err = std::fabs(got[k] - want[k]);
                    bool ok = fmt == ExpertFormat::bf16 ? got[k] == runtime::bf16_to_float(runtime::float_to_bf16(want[k]))
                              : fmt == ExpertFormat::int4_g32 ? err <= 0.51f * amax / 7.0f * 1.004f
                                                              : err <= amax / 3.0f;  // half a step ≤ 2^e < amax/3
                    if (!ok) {
                        FAIL_CHECK(t.name, " row ", int64_t(k) / cols, " col ", int64_t(k) % cols, ": ", got[k],
                                   " vs ", want[k]);
                        break;
                    }
                }
            }
            worst_rel = std::max(worst_rel, rel_rms(want, got));
        }
        MESSAGE("worst relative RMS error of an expert matrix: ", worst_rel);
        if (fmt == ExpertFormat::bf16) CHECK(worst_rel < 0.004);
        if (fmt == ExpertFormat::int4_g32) CHECK(worst_rel < 0.15);
        if (fmt == ExpertFormat::mxfp4_g32) CHECK(worst_rel < 0.2);

        // A_log: K3 stores max(H, head_dim) = 32 values, the first H = 4 per head in log[1, 16], then zeros.
        const std::vector<float> a = to_fp32(m.checkpoint.get(names.layer(0, "self_attn.A_log")));
        REQUIRE(a.size() == 32);
        for (int h = 0; h < 4; ++h) {
            CHECK(a[size_t(h)] >= 0.0f);
            CHECK(a[size_t(h)] <= std::log(16.0f));
        }
        CHECK(a[0] != a[1]);
        for (size_t i = 4; i < a.size(); ++i) CHECK(a[i] == 0.0f);
    }
}

TEST_CASE("the tensor bytes do not depend on sharding") {
    const ModelConfig c = k3_tiny_config();
    const auto& one = tiny(ExpertFormat::mxfp4_g32, 64 << 20);
    const auto& many = tiny(ExpertFormat::mxfp4_g32, 300 << 10);
    Checkpoint a = Checkpoint::open(one), b = Checkpoint::open(many);
    CHECK(a.shards().size() == 1);
    CHECK(b.shards().size() > 10);
    REQUIRE(a.size() == b.size());
    for (const auto& [name, t] : a.tensors()) {
        const TensorInfo& u = b.get(name);
        REQUIRE(t->bytes.size() == u.bytes.size());
        CHECK_MESSAGE(std::memcmp(t->bytes.data(), u.bytes.data(), u.bytes.size()) == 0, name);
    }
    // The index maps every tensor to the shard that holds it.
    auto index = read_json(many / "model.safetensors.index.json");
    CHECK(index["weight_map"].size() == b.size());
    CHECK(index["metadata"]["total_size"].get<uint64_t>() == expected_bytes(c));
}

TEST_CASE("checkpoints that do not match the config are refused with every problem listed") {
    const std::filesystem::path base = tiny(ExpertFormat::int4_g32, 64 << 20);
    const ModelConfig c = k3_tiny_config(ExpertFormat::int4_g32);
    const TensorNames n(c);
    const std::string q = n.layer(1, "self_attn.q_proj.weight");
    const std::string embed = n.embed_tokens();
    const std::string packed = n.expert(2, 5, ExpertProj::w2) + ".weight_packed";

    SUBCASE("wrong dtype") {
        ScratchDir d("ck");
        rewrite(base, d.path(), [&](auto& ts) {
            find(ts, embed).dtype = DType::i16;   // same size as BF16, not a float
            find(ts, packed).dtype = DType::f32;  // INT4 packing is int32
        });
        std::string msg = validation_error(d.path());
        INFO(msg);
        CHECK(msg.find("2 mismatched") != std::string::npos);
        CHECK(msg.find(embed + ": dtype I16, expected BF16") != std::string::npos);
        CHECK(msg.find(packed + ": dtype F32, expected I32") != std::string::npos);
    }
    SUBCASE("wrong shape") {
        ScratchDir d("ck");
        rewrite(base, d.path(), [&](auto& ts) { find(ts, q).shape = {256, 128}; });
        std::string msg = validation_error(d.path());
        INFO(msg);
        CHECK(msg.find(q + ": shape [256, 128], expected [128, 256]") != std::string::npos);
    }
    SUBCASE("missing and unexpected tensors") {
        ScratchDir d("ck");
        rewrite(base, d.path(), [&](auto& ts) {
            std::erase_if(ts, [&](const OwnedTensor& t) { return t.name == q; });
            find(ts, embed).name = "language_model.model.embed.weight";
        });
        std::string msg = validation_error(d.path());
        INFO(msg);
        CHECK(msg.find("2 missing") != std::string::npos);
        CHECK(msg.find(q + " (BF16 [128, 256])") != std::string::npos);
        CHECK(msg.find(embed) != std::string::npos);
        CHECK(msg.find("1 unexpected: language_model.model.embed.weight (BF16 [4096, 256])") != std::string::npos);
    }
    SUBCASE("INT4 weight_shape that disagrees with the matrix") {
        ScratchDir d("ck");
        const std::string shape_name = n.expert(1, 0, ExpertProj::w1) + ".weight_shape";
        rewrite(base, d.path(), [&](auto& ts) {
            int64_t bad[2] = {128, 96};  // transposed
            std::memcpy(find(ts, shape_name).bytes.data(), bad, 16);
        });
        std::string msg = validation_error(d.path());
        INFO(msg);
        CHECK(msg.find(shape_name + ": holds (128, 96), expected (96, 128)") != std::string::npos);
    }
    SUBCASE("tensors outside the text model are ignored; F16 and F32 are accepted for bf16 weights") {
        ScratchDir d("ck");
        rewrite(base, d.path(), [&](auto& ts) {
            ts.push_back({"vision_tower.patch_embed.weight", DType::bf16, {2}, std::vector<std::byte>(4)});
            OwnedTensor& t = find(ts, q);
            std::vector<std::byte> f32(t.bytes.size() * 2);
            for (size_t i = 0; i < t.bytes.size() / 2; ++i) {
                uint16_t b;
                std::memcpy(&b, t.bytes.data() + 2 * i, 2);
                float v = runtime::bf16_to_float(b);
                std::memcpy(f32.data() + 4 * i, &v, 4);
            }
            t.dtype = DType::f32;
            t.bytes = f32;
        });
        ModelFiles m = open_model(d.path());
        CHECK(to_fp32(m.checkpoint.get(q)) == to_fp32(Checkpoint::open(base).get(q)));
    }
    SUBCASE("a config with a different expert format") {
        nlohmann::json j = to_json(k3_tiny_config(ExpertFormat::mxfp4_g32));
        ScratchDir d("ck");
        rewrite(base, d.path(), [](auto&) {});
        std::filesystem::remove(d / "config.json");
        write_file(d / "config.json", j.dump());
        std::string msg = validation_error(d.path());
        INFO(msg);
        CHECK(msg.find("384 unexpected") != std::string::npos);  // INT4's .weight_shape parts
        CHECK(msg.find(".weight_shape (I64 [2])") != std::string::npos);
        CHECK(msg.find("768 mismatched") != std::string::npos);  // packed and scale dtypes
        CHECK(msg.find(".weight_packed: dtype I32, expected U8") != std::string::npos);
    }
}

TEST_CASE("sharded directories: missing shards and inconsistent indexes are refused") {
    ScratchDir dir("ck");
    copy_dir(tiny(ExpertFormat::mxfp4_g32, 1 << 20), dir.path());
    const std::vector<std::string> shards = Checkpoint::open(dir.path()).shards();
    REQUIRE(shards.size() >= 3);

    SUBCASE("missing shard") {
        std::filesystem::remove(dir / shards[1]);
        try {
            Checkpoint::open(dir.path());
            FAIL("opened a checkpoint with a missing shard");
        } catch (const CheckpointError& e) {
            std::string msg = e.what();
            INFO(msg);
            CHECK(msg.find("missing shard '" + shards[1] + "'") != std::string::npos);
        }
    }
    SUBCASE("index places a tensor in the wrong shard") {
        auto index = read_json(dir / "model.safetensors.index.json");
        const std::string name = index["weight_map"].begin().key();
        index["weight_map"][name] = shards[2];
        write_file(dir / "model.safetensors.index.json", index.dump());
        CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("which does not hold it"), CheckpointError);
    }
    SUBCASE("index escapes the directory") {
        auto index = read_json(dir / "model.safetensors.index.json");
        index["weight_map"][index["weight_map"].begin().key()] = "../elsewhere.safetensors";
        write_file(dir / "model.safetensors.index.json", index.dump());
        CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("not a file name"), CheckpointError);
    }
    SUBCASE("a tensor in two shards") {
        std::filesystem::remove(dir / "model.safetensors.index.json");
        std::filesystem::copy_file(dir / shards[0], dir / "zz-copy.safetensors");
        CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("appears in both"), CheckpointError);
    }
    SUBCASE("a truncated shard") {
        std::string s = read_file(dir / shards[1]);
        write_file(dir / shards[1], s.substr(0, s.size() / 2));
        CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path()), doctest::Contains("outside the data section"), CheckpointError);
    }
    SUBCASE("no index and no safetensors") {
        ScratchDir empty("ck");
        CHECK_THROWS_WITH_AS(Checkpoint::open(empty.path()), doctest::Contains("no safetensors files"), CheckpointError);
    }
}

TEST_CASE("expected tensor lists of the large presets and the 48B layout") {
    const ModelConfig k3 = k3_config();
    const auto specs = expected_tensors(k3);
    // 92 MoE layers × 896 experts × 3 matrices × (packed + scale)
    size_t expert_parts = 0;
    for (const auto& s : specs) expert_parts += s.part != TensorSpec::Part::whole;
    CHECK(expert_parts == size_t(92) * 896 * 3 * 2);
    const TensorNames n(k3);
    CHECK(n.expert(12, 7, ExpertProj::w3) == "language_model.model.layers.12.block_sparse_moe.experts.7.w3");
    bool saw = false;
    for (const auto& s : specs)
        if (s.name == n.expert(12, 7, ExpertProj::w3) + ".weight_packed") {
            CHECK(s.dtype == DType::u8);
            CHECK(s.shape == std::vector<int64_t>{3072, 1792});
            saw = true;
        } else if (s.name == n.layer(0, "self_attn.A_log")) {
            CHECK(s.shape == std::vector<int64_t>{128});  // the K3 quirk: [head_dim], first 96 used
        } else if (s.name == n.layer(5, "block_sparse_moe.shared_experts.gate_proj.weight")) {
            CHECK(s.shape == std::vector<int64_t>{6144, 7168});
        }
    CHECK(saw);
    // About 1.4 TiB, as published.
    CHECK(double(expected_bytes(k3)) / (1ull << 40) == doctest::Approx(1.42).epsilon(0.03));

    const ModelConfig l48 = load_config(kiln::model::test::fixture("kimi_linear_48b_config.json"));
    const TensorNames m(l48);
    CHECK(m.lm_head() == "lm_head.weight");
    CHECK(m.layer(0, "self_attn.g_a_proj.weight") == "model.layers.0.self_attn.g_a_proj.weight");
    bool has_q_proj = false, has_latent = false;
    for (const auto& s : expected_tensors(l48)) {
        if (s.name == m.layer(3, "self_attn.q_proj.weight")) has_q_proj = true;
        if (s.name.find("routed_expert_down_proj") != std::string::npos) has_latent = true;
        if (s.name == m.layer(0, "self_attn.A_log")) CHECK(s.shape == std::vector<int64_t>{1, 1, 32, 1});
        if (s.name == m.expert(1, 0, ExpertProj::w1) + ".weight") CHECK(s.shape == std::vector<int64_t>{1024, 2304});
    }
    CHECK(has_q_proj);     // q_lora_rank null → plain q_proj
    CHECK_FALSE(has_latent);
}
