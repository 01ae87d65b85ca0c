#include "model/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/atomic_file.hpp"
#include "runtime/strings.hpp"

namespace kiln::model {

namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MiB, far above any real header

[[noreturn]] void fail(const std::filesystem::path& p, const std::string& why) {
    throw CheckpointError(fmt::format("{}: {}", p.filename().string(), why));
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string shape_string(std::span<const int64_t> shape) {
    std::vector<std::string> dims;
    for (int64_t d : shape) dims.push_back(std::to_string(d));
    return fmt::format("[{}]", join(dims, ", "));
}

size_t TensorDecl::nbytes() const {
    size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= size_t(d);
    return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw IoError(fmt::format("{}: cannot open: {}", path.string(), errno_text()));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        throw IoError(fmt::format("{}: cannot stat: {}", path.string(), errno_text()));
    }
    const uint64_t size = uint64_t(st.st_size);
    if (size < 8) {
        ::close(fd);
        fail(path, fmt::format("truncated header: the file has {} bytes, fewer than the 8-byte header length", size));
    }
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) throw IoError(fmt::format("{}: cannot map: {}", path.string(), errno_text()));
    f->map_ = map;
    f->map_size_ = size;
    const auto* base = static_cast<const std::byte*>(map);

    uint64_t header_len;
    std::memcpy(&header_len, base, 8);
    if (header_len > size - 8)
        fail(path, fmt::format("truncated header: header length {} exceeds the {} bytes after the length field",
                               header_len, size - 8));
    if (header_len > kMaxHeader) fail(path, fmt::format("header length {} is implausibly large", header_len));
    if (header_len < 2) fail(path, "header is empty");
    std::string_view text(reinterpret_cast<const char*>(base + 8), header_len);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        fail(path, fmt::format("header is not valid JSON ({})", e.what()));
    }
    if (!header.is_object()) fail(path, "header is not a JSON object");

    const uint64_t data_start = 8 + header_len;
    const uint64_t data_size = size - data_start;
    struct Range {
        uint64_t b, e;
        size_t idx;
    };
    std::vector<Range> ranges;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail(path, "__metadata__ is not an object");
            for (auto m = v.begin(); m != v.end(); ++m)
                f->metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
            continue;
        }
        auto bad = [&](const std::string& why) { fail(path, fmt::format("tensor '{}': {}", name, why)); };
        if (!v.is_object()) bad("header entry is not an object");
        auto dt = v.find("dtype");
        auto sh = v.find("shape");
        auto off = v.find("data_offsets");
        if (dt == v.end() || !dt->is_string()) bad("missing dtype");
        if (sh == v.end() || !sh->is_array()) bad("missing shape");
        if (off == v.end() || !off->is_array() || off->size() != 2) bad("data_offsets is not [begin, end]");
        auto dtype = parse_safetensors_dtype(dt->get<std::string>());
        if (!dtype) bad(fmt::format("unknown dtype '{}'", dt->get<std::string>()));
        TensorInfo t;
        t.name = name;
        t.dtype = *dtype;
        t.file = path.filename().string();
        unsigned __int128 nbytes = dtype_size(*dtype);
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 62))
                bad(fmt::format("shape entry {} is not a plausible dimension", d.dump()));
            t.shape.push_back(d.get<int64_t>());
            nbytes *= uint64_t(t.shape.back());
            if (nbytes > (unsigned __int128)(uint64_t(1) << 62)) bad(fmt::format("shape {} is too large", sh->dump()));
        }
        for (const auto& o : *off)
            if (!o.is_number_unsigned()) bad("data_offsets entries must be non-negative integers");
        uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
        if (b > e || e > data_size)
            bad(fmt::format("data_offsets [{}, {}] lie outside the data section ({} bytes)", b, e, data_size));
        if (uint64_t(nbytes) != e - b)
            bad(fmt::format("data_offsets span {} bytes but {} {} needs {}", e - b, dt->get<std::string>(),
                            shape_string(t.shape), uint64_t(nbytes)));
        t.bytes = std::span<const std::byte>(base + data_start + b, e - b);
        ranges.push_back({b, e, f->tensors_.size()});
        f->tensors_.push_back(std::move(t));
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) { return x.b < y.b; });
    // Compare each non-empty range with the furthest-reaching one before it.
    const Range* reach = nullptr;
    for (const Range& q : ranges) {
        if (q.e == q.b) continue;
        if (reach && q.b < reach->e)
            fail(path, fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", f->tensors_[reach->idx].name,
                                   reach->b, reach->e, f->tensors_[q.idx].name, q.b, q.e));
        if (!reach || q.e > reach->e) reach = &q;
    }
    for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_.emplace(f->tensors_[i].name, i);
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(map_, map_size_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::vector<TensorDecl> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tmp_(temp_sibling(path_.string())), tensors_(std::move(tensors)) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        uint64_t n = t.nbytes();
        header[t.name] = {{"dtype", safetensors_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError(fmt::format("{}: cannot create: {}", tmp_.string(), errno_text()));
    uint64_t len = text.size();
    put(&len, 8);
    put(text.data(), text.size());
    while (next_ < tensors_.size() && tensors_[next_].nbytes() == 0) ++next_;
}

SafetensorsWriter::~SafetensorsWriter() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(tmp_.c_str());
    }
}

void SafetensorsWriter::put(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw IoError(fmt::format("{}: write failed: {}", tmp_.string(), errno_text()));
        }
        p += w;
        n -= size_t(w);
        file_size_ += uint64_t(w);
    }
}

void SafetensorsWriter::write(std::string_view name, std::span<const std::byte> bytes) {
    if (next_ >= tensors_.size() || tensors_[next_].name != name)
        throw InvalidArgument(fmt::format("safetensors writer: tensor '{}' written out of declaration order", name));
    const size_t want = tensors_[next_].nbytes();
    if (written_ + bytes.size() > want)
        throw InvalidArgument(fmt::format("safetensors writer: tensor '{}' gets {} bytes, declared {}", name,
                                          written_ + bytes.size(), want));
    put(bytes.data(), bytes.size());
    written_ += bytes.size();
    if (written_ == want) {
        ++next_;
        written_ = 0;
        // zero-byte tensors that follow need no write() call
        while (next_ < tensors_.size() && tensors_[next_].nbytes() == 0) ++next_;
    }
}

void SafetensorsWriter::finish() {
    if (next_ != tensors_.size())
        throw InvalidArgument(fmt::format("safetensors writer: {} of {} tensors written", next_, tensors_.size()));
    if (::fsync(fd_) != 0) throw IoError(fmt::format("{}: fsync failed: {}", tmp_.string(), errno_text()));
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
        std::string why = errno_text();
        ::unlink(tmp_.c_str());
        throw IoError(fmt::format("{}: rename failed: {}", path_.string(), why));
    }
    fsync_path(path_.parent_path().empty() ? "." : path_.parent_path().string());
}

}  // namespace kiln::model
