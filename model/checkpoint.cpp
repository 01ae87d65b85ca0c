#include "model/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/expert_format.hpp"
#include "runtime/strings.hpp"
#include "runtime/bf16.hpp"

namespace kiln::model {

namespace {

std::string describe(DType t, std::span<const int64_t> shape) {
    return fmt::format("{} {}", safetensors_name(t), shape_string(shape));
}

std::string list(const std::vector<std::string>& v, size_t limit) {
    std::vector<std::string> head(v.begin(), v.begin() + std::min(v.size(), limit));
    std::string s = fmt::format("{}", join(head, "; "));
    if (v.size() > limit) s += fmt::format("; ... and {} more", v.size() - limit);
    return s;
}

bool valid_shard_name(const std::string& s) {
    return !s.empty() && s.find('/') == std::string::npos && s.find('\\') == std::string::npos && s != "." &&
           s != "..";
}

}  // namespace

std::string ValidationReport::message(size_t limit) const {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(fmt::format("{} missing: {}", missing.size(), list(missing, limit)));
    if (!unexpected.empty())
        parts.push_back(fmt::format("{} unexpected: {}", unexpected.size(), list(unexpected, limit)));
    if (!mismatched.empty())
        parts.push_back(fmt::format("{} mismatched: {}", mismatched.size(), list(mismatched, limit)));
    return fmt::format("{}", join(parts, " | "));
}

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
    Checkpoint ck;
    ck.dir_ = dir;
    if (!std::filesystem::is_directory(dir))
        throw IoError(fmt::format("{}: not a directory", dir.string()));
    const std::filesystem::path index_path = dir / "model.safetensors.index.json";
    std::map<std::string, std::vector<std::string>> listed;  // shard → tensors the index puts there
    if (std::filesystem::exists(index_path)) {
        std::ifstream in(index_path, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(ss.str());
        } catch (const nlohmann::json::parse_error& e) {
            throw CheckpointError(fmt::format("{}: not valid JSON ({})", index_path.string(), e.what()));
        }
        auto wm = j.find("weight_map");
        if (!j.is_object() || wm == j.end() || !wm->is_object())
            throw CheckpointError(fmt::format("{}: no weight_map object", index_path.string()));
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it->is_string() || !valid_shard_name(it->get<std::string>()))
                throw CheckpointError(fmt::format("{}: weight_map['{}'] is not a file name in the directory",
                                                  index_path.string(), it.key()));
            listed[it->get<std::string>()].push_back(it.key());
        }
        for (const auto& [shard, names] : listed) {
            if (!std::filesystem::exists(dir / shard))
                throw CheckpointError(fmt::format(
                    "{}: missing shard '{}' (model.safetensors.index.json places {} tensor{} there, e.g. '{}')",
                    dir.string(), shard, names.size(), names.size() == 1 ? "" : "s", names.front()));
        }
        for (const auto& [shard, names] : listed) ck.files_.push_back(SafetensorsFile::open(dir / shard));
    } else if (std::filesystem::exists(dir / "model.safetensors")) {
        ck.files_.push_back(SafetensorsFile::open(dir / "model.safetensors"));
    } else {
        std::vector<std::filesystem::path> found;
        for (const auto& e : std::filesystem::directory_iterator(dir))
            if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path());
        std::sort(found.begin(), found.end());
        if (found.empty()) throw CheckpointError(fmt::format("{}: no safetensors files", dir.string()));
        for (const auto& p : found) ck.files_.push_back(SafetensorsFile::open(p));
    }
    for (const auto& f : ck.files_) {
        for (const auto& t : f->tensors()) {
            auto [it, inserted] = ck.index_.emplace(t.name, &t);
            if (!inserted)
                throw CheckpointError(fmt::format("{}: tensor '{}' appears in both {} and {}", dir.string(), t.name,
                                                  it->second->file, t.file));
        }
    }
    for (const auto& [shard, names] : listed) {
        for (const auto& n : names) {
            auto it = ck.index_.find(n);
            if (it == ck.index_.end() || it->second->file != shard)
                throw CheckpointError(fmt::format("{}: model.safetensors.index.json places '{}' in {}, which does not hold it",
                                                  dir.string(), n, shard));
        }
    }
    return ck;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
    const TensorInfo* t = find(name);
    if (!t) throw CheckpointError(fmt::format("{}: tensor '{}' not found", dir_.string(), name));
    return *t;
}

std::vector<std::string> Checkpoint::shards() const {
    std::vector<std::string> out;
    for (const auto& f : files_) out.push_back(f->path().filename().string());
    return out;
}

ValidationReport Checkpoint::check(const ModelConfig& c) const {
    ValidationReport r;
    const TensorNames names(c);
    std::set<std::string_view> expected;
    const std::vector<TensorSpec> specs = expected_tensors(c);
    for (const auto& s : specs) {
        expected.insert(s.name);
        const TensorInfo* t = find(s.name);
        if (!t) {
            r.missing.push_back(fmt::format("{} ({})", s.name, describe(s.dtype, s.shape)));
            continue;
        }
        if (!s.accepts(t->dtype)) {
            r.mismatched.push_back(fmt::format("{}: dtype {}, expected {}", s.name, safetensors_name(t->dtype), safetensors_name(s.dtype)));
            continue;
        }
        if (!s.accepts(t->shape)) {
            r.mismatched.push_back(fmt::format("{}: shape {}, expected {}", s.name, shape_string(t->shape),
                                               shape_string(s.shape)));
            continue;
        }
        if (s.part == TensorSpec::Part::shape_info) {
            // INT4 .weight_shape must hold the logical (out, in) of its matrix.
            int64_t v[2];
            for (int i = 0; i < 2; ++i) {
                if (t->dtype == DType::i64) {
                    std::memcpy(&v[i], t->bytes.data() + 8 * i, 8);
                } else {
                    int32_t w;
                    std::memcpy(&w, t->bytes.data() + 4 * i, 4);
                    v[i] = w;
                }
            }
            if (v[0] != s.logical_shape[0] || v[1] != s.logical_shape[1])
                r.mismatched.push_back(fmt::format("{}: holds ({}, {}), expected ({}, {})", s.name, v[0], v[1],
                                                   s.logical_shape[0], s.logical_shape[1]));
        }
    }
    for (const auto& [name, t] : index_) {
        if (expected.count(name) || names.outside_text_model(name)) continue;
        r.unexpected.push_back(fmt::format("{} ({})", name, describe(t->dtype, t->shape)));
    }
    return r;
}

void Checkpoint::validate(const ModelConfig& c) const {
    ValidationReport r = check(c);
    if (!r.ok())
        throw CheckpointError(fmt::format("{}: checkpoint does not match config.json: {}", dir_.string(), r.message()));
}

std::vector<float> to_fp32(const TensorInfo& t) {
    const size_t n = size_t(t.numel());
    std::vector<float> out(n);
    const std::byte* p = t.bytes.data();
    switch (t.dtype) {
        case DType::bf16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t b;
                std::memcpy(&b, p + 2 * i, 2);
                out[i] = runtime::bf16_to_float(b);
            }
            break;
        case DType::f16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t b;
                std::memcpy(&b, p + 2 * i, 2);
                out[i] = runtime::f16_to_float(b);
            }
            break;
        case DType::f32:
            std::memcpy(out.data(), p, 4 * n);
            break;
        case DType::f64:
            for (size_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, p + 8 * i, 8);
                out[i] = float(d);
            }
            break;
        default:
            throw CheckpointError(fmt::format("tensor '{}': dtype {} is not a float type", t.name, safetensors_name(t.dtype)));
    }
    return out;
}

std::vector<float> load_expert_fp32(const Checkpoint& ck, const ModelConfig& c, int layer, int expert, ExpertProj p) {
    const TensorNames names(c);
    const std::string base = names.expert(layer, expert, p);
    const int64_t I = c.moe.moe_intermediate_size, x = c.expert_in_dim();
    const int64_t rows = p == ExpertProj::w2 ? x : I;
    const int64_t cols = p == ExpertProj::w2 ? I : x;
    auto expect = [&](const TensorInfo& t, std::vector<int64_t> shape) {
        if (t.shape != shape)
            throw CheckpointError(fmt::format("tensor '{}': shape {}, expected {}", t.name, shape_string(t.shape),
                                              shape_string(shape)));
    };
    if (c.expert_format == ExpertFormat::bf16) {
        const TensorInfo& t = ck.get(base + ".weight");
        expect(t, {rows, cols});
        return to_fp32(t);
    }
    const TensorInfo& packed = ck.get(base + ".weight_packed");
    const TensorInfo& scale = ck.get(base + ".weight_scale");
    expect(packed, packed_shape(c.expert_format, rows, cols));
    expect(scale, scale_shape(rows, cols));
    std::vector<float> out(size_t(rows * cols));
    if (c.expert_format == ExpertFormat::int4_g32) {
        if (packed.dtype != DType::i32 || scale.dtype != DType::bf16)
            throw CheckpointError(fmt::format("tensor '{}': INT4 expects I32 packed and BF16 scale, found {} and {}", base,
                                              safetensors_name(packed.dtype), safetensors_name(scale.dtype)));
        dequantize_int4_g32(packed.bytes, scale.bytes, rows, cols, out);
    } else {
        if (packed.dtype != DType::u8 || (scale.dtype != DType::u8 && scale.dtype != DType::f8_e8m0))
            throw CheckpointError(fmt::format("tensor '{}': MXFP4 expects U8 packed and U8/F8_E8M0 scale, found {} and {}",
                                              base, safetensors_name(packed.dtype), safetensors_name(scale.dtype)));
        dequantize_mxfp4_g32(packed.bytes, scale.bytes, rows, cols, out);
    }
    return out;
}

ModelFiles open_model(const std::filesystem::path& dir) {
    ModelConfig cfg = load_config(dir);
    Checkpoint ck = Checkpoint::open(dir);
    ck.validate(cfg);
    return ModelFiles{std::move(cfg), std::move(ck)};
}

}  // namespace kiln::model
