#include "model/make_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln_config.h"
#include "model/expert_format.hpp"
#include "model/safetensors.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/log.hpp"

#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tiny_vocab.hpp"
#endif

namespace kiln::model {

namespace {

// splitmix64: tiny, fast, and fully specified, so the weights are the same everywhere.
class Rng {
public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    uint64_t next() {
        uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    double normal() {  // Box-Muller; both values of a pair are used
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        double u1 = 1.0 - uniform(), u2 = uniform();
        double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
        spare_ = r * std::sin(a);
        has_spare_ = true;
        return r * std::cos(a);
    }

private:
    uint64_t s_;
    double spare_ = 0;
    bool has_spare_ = false;
};

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char ch : s) h = (h ^ uint8_t(ch)) * 0x100000001b3ull;
    return h;
}

Rng tensor_rng(uint64_t seed, std::string_view name) {
    Rng mix(seed ^ fnv1a(name));
    return Rng(mix.next());
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// Draws element i of logical tensor t (see the scale table in make_model.hpp).
float draw(const ModelConfig& c, const LogicalTensor& t, int64_t i, Rng& rng) {
    switch (t.role) {
        case TensorRole::embedding: return float(rng.normal());
        case TensorRole::lm_head:
        case TensorRole::router:
        case TensorRole::expert: return float(rng.normal() / std::sqrt(double(t.fan_in())));
        case TensorRole::linear: {
            double std = 1.0 / std::sqrt(double(t.fan_in()));
            if (ends_with(t.name, "self_attn.f_b_proj.weight")) std *= 0.2;
            return float(rng.normal() * std);
        }
        case TensorRole::conv: return float(rng.normal() / std::sqrt(double(t.shape.back())));
        case TensorRole::norm: return float(0.9 + 0.2 * rng.uniform());
        case TensorRole::a_log: {
            double u = rng.uniform();
            return i < c.kda.num_heads ? float(std::log(1.0 + 15.0 * u)) : 0.0f;
        }
        case TensorRole::dt_bias: {
            double u = rng.uniform();
            if (c.kda.gate_lower_bound) return float(-u);
            double dt = 0.001 + 0.099 * u;
            return float(std::log(std::expm1(dt)));  // softplus(result) = dt
        }
        case TensorRole::router_bias: return float(0.02 * rng.normal());
        case TensorRole::res_query: return float(rng.normal() * 0.5 / std::sqrt(double(c.hidden_size)));
    }
    return 0.0f;
}

void append_as(DType dt, std::span<const float> v, std::vector<std::byte>& out) {
    out.clear();
    if (dt == DType::bf16) {
        out = to_bf16_bytes(v);
    } else if (dt == DType::f32) {
        out.resize(v.size() * 4);
        std::memcpy(out.data(), v.data(), out.size());
    } else {
        throw InvalidArgument(fmt::format("make-model: cannot store random weights as {}", safetensors_name(dt)));
    }
}

std::string shard_name(size_t i, size_t n) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n); }

}  // namespace

std::vector<float> random_weights(const ModelConfig& c, const LogicalTensor& t, uint64_t seed) {
    Rng rng = tensor_rng(seed, t.name);
    std::vector<float> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = draw(c, t, int64_t(i), rng);
    return v;
}

MakeModelResult write_model(const ModelConfig& c, const std::filesystem::path& dir, const MakeModelOptions& opts) {
    validate_config(c);
    namespace fs = std::filesystem;
    if (fs::exists(dir) && !fs::is_directory(dir)) throw IoError(fmt::format("{}: not a directory", dir.string()));
    fs::create_directories(dir);
    if (opts.replace) {
        fs::remove(dir / "config.json");  // the directory counts as complete again only at the end
    } else {
        for (const auto& e : fs::directory_iterator(dir)) {
            const auto n = e.path().filename().string();
            if (n == "config.json" || e.path().extension() == ".safetensors")
                throw InvalidArgument(fmt::format("{}: already holds a checkpoint ({}); pass --force to replace it",
                                                  dir.string(), n));
        }
    }

    const std::vector<LogicalTensor> logical = logical_tensors(c);
    const std::vector<TensorSpec> specs = expected_tensors(c);

    // Plan shards: consecutive tensors, a new shard whenever the next tensor would cross the limit.
    std::vector<std::vector<size_t>> shards(1);
    uint64_t shard_bytes = 0, total = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        uint64_t n = specs[i].nbytes();
        if (!shards.back().empty() && shard_bytes + n > opts.max_shard_bytes) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shards.back().push_back(i);
        shard_bytes += n;
        total += n;
    }

    const fs::space_info space = fs::space(dir);
    if (total > space.available)
        throw IoError(fmt::format("{}: the checkpoint needs {:.1f} GiB, only {:.1f} GiB are free", dir.string(),
                                  double(total) / (1ull << 30), double(space.available) / (1ull << 30)));

    MakeModelResult result;
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    // The packed parts of one expert come from one fp32 matrix; keep the last one quantised.
    size_t cached_logical = SIZE_MAX;
    PackedMatrix cached;
    std::vector<float> fp;
    std::vector<std::byte> bytes;
    constexpr size_t kChunk = 1 << 20;  // elements per write for large tensors

    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string name = shard_name(s, shards.size());
        std::vector<TensorDecl> decls;
        for (size_t i : shards[s]) decls.push_back(TensorDecl{specs[i].name, specs[i].dtype, specs[i].shape});
        SafetensorsWriter w(dir / name, std::move(decls));
        for (size_t i : shards[s]) {
            const TensorSpec& spec = specs[i];
            const LogicalTensor& t = logical[spec.logical];
            weight_map[spec.name] = name;
            if (spec.part == TensorSpec::Part::whole) {
                // Stream in chunks: the same generator sequence as random_weights().
                Rng rng = tensor_rng(opts.seed, t.name);
                const int64_t n = t.numel();
                for (int64_t start = 0; start < n; start += int64_t(kChunk)) {
                    const int64_t len = std::min<int64_t>(int64_t(kChunk), n - start);
                    fp.resize(size_t(len));
                    for (int64_t k = 0; k < len; ++k) fp[size_t(k)] = draw(c, t, start + k, rng);
                    append_as(spec.dtype, fp, bytes);
                    w.write(spec.name, bytes);
                }
                continue;
            }
            const int64_t rows = t.shape[0], cols = t.shape[1];
            if (spec.part == TensorSpec::Part::shape_info) {
                w.write(spec.name, int4_weight_shape_bytes(rows, cols));
                continue;
            }
            if (cached_logical != spec.logical) {
                fp = random_weights(c, t, opts.seed);
                cached = c.expert_format == ExpertFormat::int4_g32 ? quantize_int4_g32(fp, rows, cols)
                                                                   : quantize_mxfp4_g32(fp, rows, cols);
                cached_logical = spec.logical;
            }
            w.write(spec.name, spec.part == TensorSpec::Part::packed ? cached.packed : cached.scale);
        }
        w.finish();
        result.shards.push_back(name);
    }
    result.tensors = specs.size();
    result.tensor_bytes = total;

    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / "model.safetensors.index.json", index.dump(2) + "\n");

    if (opts.replace) {
        // Shards of an earlier, differently sharded run would otherwise linger beside the index.
        std::set<std::string> keep(result.shards.begin(), result.shards.end());
        for (const auto& e : fs::directory_iterator(dir)) {
            const auto n = e.path().filename().string();
            if (e.path().extension() == ".safetensors" && !keep.count(n)) fs::remove(e.path());
        }
    }
#if KILN_HAVE_TOKENIZER
    // A model over the generated tiny vocabulary (k3-tiny) ships that vocabulary, so the directory is
    // a complete checkpoint for `kiln generate --model DIR` / `kiln tokenize --model DIR`.
    if (c.vocab_size == int(tiny_vocab_size)) write_tiny_vocab(dir);
#endif
    write_file_atomic(dir / "config.json", to_json(c).dump(2) + "\n");
    log::info("make-model: {} tensors, {} bytes, {} shard(s) in {}", result.tensors, total, result.shards.size(),
              dir.string());
    return result;
}

void write_model_config(const ModelConfig& c, const std::filesystem::path& dir, bool replace) {
    std::filesystem::create_directories(dir);
    if (!replace && std::filesystem::exists(dir / "config.json"))
        throw InvalidArgument(fmt::format("{}: already holds a config.json; pass --force to replace it", dir.string()));
    write_file_atomic(dir / "config.json", to_json(c).dump(2) + "\n");
}

}  // namespace kiln::model
