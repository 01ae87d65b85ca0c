// A checkpoint directory: config.json plus safetensors shards, memory-mapped.
//
// Checkpoint::open(dir) maps DIR/model.safetensors.index.json's shards (or DIR/model.safetensors, or every
// DIR/*.safetensors) and indexes tensors by name; the index must name existing shards that hold the
// tensors it lists, and no tensor may appear twice. check()/validate() compare the tensors with
// expected_tensors(config) and report every missing, unexpected and mismatched (dtype, shape) tensor in one
// error. Tensor bytes are spans into the mappings and live as long as the Checkpoint.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_names.hpp"

namespace kiln::model {

struct ValidationReport {
    std::vector<std::string> missing;     // "name (BF16 [256, 256])"
    std::vector<std::string> unexpected;  // "name (F32 [3])"
    std::vector<std::string> mismatched;  // "name: dtype I32, expected BF16"
    bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
    // One paragraph naming up to `limit` entries of each list.
    std::string message(size_t limit = 8) const;
};

class Checkpoint {
public:
    static Checkpoint open(const std::filesystem::path& dir);

    const std::filesystem::path& dir() const { return dir_; }
    const TensorInfo* find(std::string_view name) const;
    // Throws CheckpointError naming the tensor and the directory when absent.
    const TensorInfo& get(std::string_view name) const;
    size_t size() const { return index_.size(); }
    // All tensors by name (sorted).
    const std::map<std::string, const TensorInfo*, std::less<>>& tensors() const { return index_; }
    // Shard file names, in the order they were opened.
    std::vector<std::string> shards() const;

    ValidationReport check(const ModelConfig& c) const;
    void validate(const ModelConfig& c) const;  // throws CheckpointError(check(c).message())

private:
    std::filesystem::path dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorInfo*, std::less<>> index_;
};

// A BF16 / F16 / F32 / F64 tensor as fp32 (exact for the first three). Other dtypes throw CheckpointError.
std::vector<float> to_fp32(const TensorInfo& t);

// A routed expert matrix [out, in] (w1/w3: [I, ℓ]; w2: [ℓ, I]) dequantised to fp32 from whichever format
// c.expert_format says.
std::vector<float> load_expert_fp32(const Checkpoint& ck, const ModelConfig& c, int layer, int expert, ExpertProj p);

// config.json + checkpoint, validated against each other.
struct ModelFiles {
    ModelConfig config;
    Checkpoint checkpoint;
};
ModelFiles open_model(const std::filesystem::path& dir);

}  // namespace kiln::model
