// Scratch space for a test: a fresh temporary directory removed at scope exit, and the sandbox a test
// runs the kiln executable in (tests/common/cli_runner.hpp): its own directory, its own user kernel
// cache, and an environment cleaned of the KILN_* settings the person running the tests may have
// exported.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/temp_dir.hpp"

extern char** environ;

namespace kiln::test {

namespace fs = std::filesystem;

// <temp>/kiln-<tag>-XXXXXX, private (mkdtemp), removed with its contents.
class TempDir {
public:
    explicit TempDir(std::string_view tag = "test") : dir_("kiln-" + std::string(tag)), path(dir_.path()) {}

    std::string operator/(std::string_view sub) const { return (path / sub).string(); }

private:
    kiln::TempDir dir_;

public:
    const fs::path path;
};

// A directory for one test's kiln runs. `cache_dir` (default <dir>/cache) is the user kernel cache
// every run gets through KILN_CACHE_DIR; `launcher` (shell words, default none) is a command every
// run goes through, e.g. one that gives it a read-only view (tests/common/read_only_dir.hpp).
struct Sandbox {
    explicit Sandbox(std::string_view tag = "cli") : dir(tag), cache_dir(dir.path / "cache") {}

    TempDir dir;
    fs::path cache_dir;
    std::string launcher;
};

// The KILN_* variables a run must not inherit: every one that is set, except those that describe
// the machine or the test harness rather than a command's flags (where CUDA, NVRTC and the templates
// are, how many host threads, the log level, the KILN_TEST_* paths meson passes).
inline std::vector<std::string> inherited_kiln_settings() {
    static const char* keep[] = {"KILN_TEST_",         "KILN_LOG_LEVEL",     "KILN_CUDA_HOME",
                                 "KILN_CUDA_DRIVER",   "KILN_NVRTC_VERSION", "KILN_TEMPLATE_DIR",
                                 "KILN_HOST_THREADS",  "KILN_JIT_MAX_PARALLEL"};
    std::vector<std::string> out;
    for (char** e = environ; *e != nullptr; ++e) {
        std::string_view kv(*e);
        if (!kv.starts_with("KILN_")) continue;
        std::string_view name = kv.substr(0, kv.find('='));
        bool kept = false;
        for (const char* k : keep) kept = kept || name.starts_with(k);
        if (!kept) out.emplace_back(name);
    }
    return out;
}

}  // namespace kiln::test
