// A fresh private directory, <temp>/<prefix>-XXXXXX (mkdtemp, mode 0700), removed with everything in
// it when the object goes away. For scratch work (benchmarks, an in-memory preset written to disk);
// <temp> is $TMPDIR, else /tmp.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "runtime/error.hpp"

namespace kiln {

class TempDir {
public:
    explicit TempDir(std::string_view prefix = "kiln") {
        std::string tmpl = (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
        if (::mkdtemp(tmpl.data()) == nullptr)
            throw IoError("cannot create a temporary directory " + tmpl + ": " + std::strerror(errno));
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

}  // namespace kiln
