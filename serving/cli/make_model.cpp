// `kiln make-model`: a random-weight checkpoint (real K3 layout) from a preset.
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/make_model.hpp"
#include "model/preset.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"

namespace kiln::cli {

using namespace kiln::model;

namespace {

struct MakeModelArgs {
    std::string preset = "k3-tiny";
    std::string out;
    std::string expert_format;
    uint64_t seed = kDefaultModelSeed;
    std::string max_shard_size = "64MiB";
    bool force = false;
    bool config_only = false;
};

void run_make_model(const MakeModelArgs& a) {
    ModelConfig c = preset_config(a.preset);
    if (!a.expert_format.empty()) {
        auto f = parse_expert_format(a.expert_format);
        if (!f) throw InvalidArgument(fmt::format("--expert-format: '{}' is not one of mxfp4, int4, bf16", a.expert_format));
        c.expert_format = *f;
        validate_config(c);
    }
    if (a.config_only) {
        write_model_config(c, a.out, a.force);
        fmt::print("wrote {}/config.json ({} preset, {:.2f} GiB of weights described)\n", a.out, a.preset,
                   double(expected_bytes(c)) / (1ull << 30));
        return;
    }
    MakeModelOptions opts;
    opts.seed = a.seed;
    opts.max_shard_bytes = parse_size_flag("--max-shard-size", a.max_shard_size);
    if (opts.max_shard_bytes == 0) throw InvalidArgument("--max-shard-size: must be positive");
    opts.replace = a.force;
    MakeModelResult r = write_model(c, a.out, opts);
    fmt::print("wrote {}: preset {}, {} experts, {} tensors, {:.1f} MiB in {} shard{}, seed {}\n", a.out, a.preset,
               expert_format_name(c.expert_format), r.tensors, double(r.tensor_bytes) / (1 << 20), r.shards.size(),
               r.shards.size() == 1 ? "" : "s", a.seed);
}

}  // namespace

void add_make_model_command(CLI::App& app) {
    auto args = std::make_shared<MakeModelArgs>();
    std::string names;
    for (const auto& p : presets()) names += fmt::format("\n  {:<13} {}", p.name, p.summary);
    auto* mm = app.add_subcommand("make-model", "Write a random-weight checkpoint (real K3 layout) from a preset" + names);
    mm->add_option("--preset", args->preset, "k3-tiny, k3-slice-tp8 or k3")
        ->envname("KILN_MAKE_MODEL_PRESET")
        ->capture_default_str();
    mm->add_option("--out", args->out, "output directory")->envname("KILN_MAKE_MODEL_OUT")->required();
    mm->add_option("--expert-format", args->expert_format, "routed experts: mxfp4, int4 or bf16 (default: the preset's)")
        ->envname("KILN_MAKE_MODEL_EXPERT_FORMAT");
    mm->add_option("--seed", args->seed, "random seed; equal seeds give identical files")
        ->envname("KILN_MAKE_MODEL_SEED")
        ->capture_default_str()
        ->transform(in_range<uint64_t>(0, std::numeric_limits<uint64_t>::max()));
    mm->add_option("--max-shard-size", args->max_shard_size, "start a new shard before this size (e.g. 64MiB, 5G)")
        ->envname("KILN_MAKE_MODEL_MAX_SHARD_SIZE")
        ->capture_default_str();
    mm->add_flag("--force", args->force, "replace a checkpoint already in --out")->envname("KILN_MAKE_MODEL_FORCE");
    mm->add_flag("--config-only", args->config_only, "write only config.json (shape studies of large presets)")
        ->envname("KILN_MAKE_MODEL_CONFIG_ONLY");
    mm->callback([args] { run_make_model(*args); });
}

}  // namespace kiln::cli
