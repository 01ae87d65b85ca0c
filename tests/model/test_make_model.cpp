// `kiln make-model`: determinism (same seed → identical bytes), seeds matter, and CLI refusals.
#include <doctest/doctest.h>

#include <string>

#include "model/checkpoint.hpp"
#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "model_test_util.hpp"
#include "tests/common/cli_runner.hpp"

using namespace kiln::model;
using kiln::model::test::read_file;
using kiln::model::test::ScratchDir;

namespace {

// Runs `kiln ARGS` (plus ENV), returning its exit status; its stdout and stderr go to `log`.
int run(const std::string& args, const std::filesystem::path& log, const std::string& env = "") {
    static kiln::test::Sandbox sb("make-model");
    kiln::test::CliResult r = kiln::test::run_kiln(sb, args, env);
    kiln::model::test::write_file(log, r.out + r.err);
    return r.rc;
}

// Every file of a directory, by name → contents.
std::map<std::string, std::string> snapshot(const std::filesystem::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out[e.path().filename().string()] = read_file(e.path());
    return out;
}

}  // namespace

TEST_CASE("make-model: the same seed gives identical bytes, another seed different weights") {
    ScratchDir a("mm"), b("mm"), c("mm"), logs("mm");
    REQUIRE(run("make-model --preset k3-tiny --out " + a.path().string() + " --max-shard-size 2MiB",
                logs / "a.log") == 0);
    REQUIRE(run("make-model --preset k3-tiny --out " + b.path().string() + " --max-shard-size 2MiB",
                logs / "b.log") == 0);
    CHECK(read_file(logs / "a.log").find("seed 1") != std::string::npos);
    auto sa = snapshot(a.path()), sb = snapshot(b.path());
    CHECK(sa.size() > 3);
    CHECK(sa.count("config.json"));
    CHECK(sa.count("model.safetensors.index.json"));
    CHECK(sa == sb);

    REQUIRE(run("make-model --out " + c.path().string() + " --max-shard-size 2MiB", logs / "c.log",
                "KILN_MAKE_MODEL_SEED=7") == 0);
    auto sc = snapshot(c.path());
    CHECK(sc.at("config.json") == sa.at("config.json"));
    CHECK(sc.size() == sa.size());
    for (const auto& [name, bytes] : sa)
        if (name.ends_with(".safetensors")) CHECK_MESSAGE(sc.at(name) != bytes, name);

    // The written checkpoint loads and validates.
    ModelFiles m = open_model(a.path());
    CHECK(m.config.expert_format == ExpertFormat::mxfp4_g32);
    CHECK(m.config.num_layers == 9);
}

TEST_CASE("make-model: expert formats, --force and refusals") {
    ScratchDir out("mm"), logs("mm");
    const std::string dir = out.path().string();
    REQUIRE(run("make-model --out " + dir + " --expert-format int4", logs / "1.log") == 0);
    CHECK(load_config(out.path()).expert_format == ExpertFormat::int4_g32);

    // An existing checkpoint is not overwritten without --force.
    CHECK(run("make-model --out " + dir + " --expert-format bf16", logs / "2.log") == 1);
    CHECK(read_file(logs / "2.log").find("already holds a checkpoint") != std::string::npos);
    CHECK(load_config(out.path()).expert_format == ExpertFormat::int4_g32);

    // --force replaces it, removing shards the new checkpoint does not use.
    REQUIRE(run("make-model --out " + dir + " --expert-format bf16 --force --max-shard-size 1MiB",
                logs / "3.log") == 0);
    ModelFiles m = open_model(out.path());
    CHECK(m.config.expert_format == ExpertFormat::bf16);
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(out.path())) files += e.path().extension() == ".safetensors";
    CHECK(files == m.checkpoint.shards().size());

    CHECK(run("make-model --out " + dir + "/x --preset k4", logs / "4.log") == 1);
    CHECK(read_file(logs / "4.log").find("unknown preset 'k4'") != std::string::npos);
    CHECK(run("make-model --out " + dir + "/x --expert-format fp8", logs / "5.log") == 1);
    CHECK(read_file(logs / "5.log").find("--expert-format") != std::string::npos);

    // Large presets can be described without writing 1.4 TiB.
    REQUIRE(run("make-model --preset k3 --config-only --out " + dir + "/k3", logs / "6.log") == 0);
    ModelConfig k3 = load_config(out.path() / "k3");
    CHECK(k3.num_layers == 93);
    CHECK(k3.moe.num_experts == 896);
    CHECK(to_json(k3) == to_json(k3_config()));
}

TEST_CASE("presets") {
    const ModelConfig t = k3_tiny_config();
    CHECK(t.num_layers == 9);
    // 1-based full_attn_layers [4, 8, 9]
    for (int l = 0; l < 9; ++l) CHECK(t.is_mla(l) == (l == 3 || l == 7 || l == 8));
    CHECK_FALSE(t.is_moe(0));
    CHECK(t.is_moe(1));
    CHECK(t.kda.gate_lower_bound == -5.0f);
    CHECK(t.hidden_act == Activation::situ);
    CHECK(t.attn_res_block_size == 3);
    CHECK(t.expert_format == ExpertFormat::mxfp4_g32);

    const ModelConfig s = k3_slice_tp8_config();
    CHECK(s.kda.num_heads == 12);
    CHECK(s.mla.num_heads == 12);
    CHECK(s.moe.num_experts == 112);
    CHECK(s.hidden_size == 7168);
    CHECK(s.is_mla(s.num_layers - 1));

    const ModelConfig k = k3_config();
    CHECK(k.num_kda_layers() == 69);
    CHECK(k.num_mla_layers() == 24);
    CHECK(to_json(k) == to_json(load_config(kiln::model::test::fixture("k3_config.json"))));
    CHECK_THROWS_WITH_AS(preset_config("k2"), doctest::Contains("k3-tiny"), kiln::InvalidArgument);
}
