// Shared helpers for the model tests: fixture paths, scratch directories, raw file edits.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/common/sandbox.hpp"

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

// A fresh directory removed at scope exit (kiln::test::TempDir, with paths for answers).
class ScratchDir {
public:
    explicit ScratchDir(const std::string& tag) : dir_(tag) {}
    const std::filesystem::path& path() const { return dir_.path; }
    std::filesystem::path operator/(const std::string& s) const { return dir_.path / s; }

private:
    kiln::test::TempDir dir_;
};

}  // namespace kiln::model::test
