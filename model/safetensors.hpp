// safetensors files: a memory-mapped reader that validates the header before exposing any tensor, and a
// streaming writer that publishes a file only when it is complete (temp file, fsync, rename).
//
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [b, e]},
// "__metadata__": {str: str}}, then the data section; offsets are relative to the data section.
// The reader refuses a file whose header is truncated or longer than the file, is not a JSON object,
// names an unknown dtype, has offsets outside the data section, a byte span that does not match
// shape × dtype size, or two tensors that overlap. Errors name the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/dtype.hpp"
#include "runtime/error.hpp"

namespace kiln::model {

// A checkpoint file or directory is malformed or does not match the config.
class CheckpointError : public InvalidArgument {
public:
    using InvalidArgument::InvalidArgument;
};

// One tensor of a mapped file. `bytes` stays valid as long as the file (or Checkpoint) that owns it.
struct TensorInfo {
    std::string name;
    DType dtype = DType::u8;
    std::vector<int64_t> shape;
    std::span<const std::byte> bytes;
    std::string file;  // file name (no directory), for messages
    int64_t numel() const;
};

// "[4096, 256]"
std::string shape_string(std::span<const int64_t> shape);

class SafetensorsFile {
public:
    static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::filesystem::path& path() const { return path_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    SafetensorsFile() = default;
    std::filesystem::path path_;
    void* map_ = nullptr;
    size_t map_size_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

struct TensorDecl {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes() const;
};

// Writes one safetensors file. The header is written up front from the declarations; tensor bytes then
// follow in declaration order (a tensor may arrive in several write() calls). finish() fsyncs and renames the temp file over
// `path`; a writer destroyed before finish() removes its temp file and leaves `path` untouched.
class SafetensorsWriter {
public:
    SafetensorsWriter(std::filesystem::path path, std::vector<TensorDecl> tensors,
                      std::map<std::string, std::string> metadata = {{"format", "pt"}});
    ~SafetensorsWriter();
    SafetensorsWriter(const SafetensorsWriter&) = delete;
    SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

    void write(std::string_view name, std::span<const std::byte> bytes);
    void finish();
    uint64_t file_size() const { return file_size_; }

private:
    void put(const void* data, size_t n);
    std::filesystem::path path_, tmp_;
    std::vector<TensorDecl> tensors_;
    size_t next_ = 0;
    size_t written_ = 0;  // bytes of tensors_[next_] written so far
    int fd_ = -1;
    uint64_t file_size_ = 0;
};

// Writes `content` to `path` atomically (temp file in the same directory, fsync, rename).
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

}  // namespace kiln::model
