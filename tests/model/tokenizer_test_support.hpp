// Shared helpers for the tokenizer tests: temp directories and the tiny tokenizers.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

namespace kiln::test {

// A fresh directory under $TMPDIR, removed when the object goes away.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& tag) {
        const char* base = std::getenv("TMPDIR");
        path = std::filesystem::path(base && *base ? base : "/tmp") /
               ("kiln-test-" + tag + "-" + std::to_string(::getpid()));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

inline std::string env_or_fail(const char* name) {
    const char* v = std::getenv(name);
    REQUIRE_MESSAGE(v != nullptr, (std::string(name) + " is not set: run the tests through meson test"));
    return v;
}

}  // namespace kiln::test
