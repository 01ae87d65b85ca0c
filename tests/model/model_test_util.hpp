// Shared helpers for the model tests: fixture paths, scratch directories, raw file edits.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

namespace kiln::model::test {

inline std::filesystem::path source_root() {
    const char* r = std::getenv("KILN_TEST_SOURCE_ROOT");
    return r ? std::filesystem::path(r) : std::filesystem::current_path();
}

inline std::filesystem::path fixture(const std::string& name) { return source_root() / "tests/model/data" / name; }

inline nlohmann::json read_json(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
}

inline std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline void write_file(const std::filesystem::path& p, const std::string& s) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << s;
}

// A fresh directory removed at scope exit.
class ScratchDir {
public:
    explicit ScratchDir(const std::string& tag) {
        path_ = std::filesystem::temp_directory_path() /
                ("kiln-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& s) const { return path_ / s; }

private:
    static int& counter() {
        static int c = 0;
        return c;
    }
    std::filesystem::path path_;
};

}  // namespace kiln::model::test
