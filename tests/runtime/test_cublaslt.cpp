// cuBLASLt loading (runtime/cuda/cublaslt.hpp) without a GPU: KILN_CUBLASLT=none turns it off with a
// reason naming the variable (set before the first status call: the status is loaded once per process);
// the search order (CUDA 13 before 12, toolkit roots before the loader before the wheels) and the wheel
// paths under $VIRTUAL_ENV.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "runtime/cuda/cublaslt.hpp"

namespace {

size_t index_of(const std::vector<std::string>& v, const std::string& s) {
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == s) return i;
    return v.size();
}

}  // namespace

TEST_CASE("KILN_CUBLASLT=none disables cuBLASLt with a reason") {
    ::setenv("KILN_CUBLASLT", "none", 1);
    const kiln::runtime::CublasLtStatus& s = kiln::runtime::cublaslt_status();
    CHECK_FALSE(s.ready);
    CHECK(s.reason.find("KILN_CUBLASLT=none") != std::string::npos);
    CHECK(&kiln::runtime::cublaslt_status() == &s);  // loaded once
}

TEST_CASE("cuBLASLt search order and wheel directories") {
    namespace fs = std::filesystem;
    const fs::path venv = fs::temp_directory_path() / ("kiln-cublaslt-venv-" + std::to_string(::getpid()));
    fs::create_directories(venv / "lib" / "python3.12" / "site-packages");
    ::setenv("VIRTUAL_ENV", venv.c_str(), 1);
    ::setenv("KILN_CUDA_HOME", "/opt/kiln-cuda", 1);
    const auto c = kiln::runtime::cublaslt_library_candidates();
    fs::remove_all(venv);
    const size_t root13 = index_of(c, "/opt/kiln-cuda/lib64/libcublasLt.so.13");
    const size_t bare13 = index_of(c, "libcublasLt.so.13");
    const size_t bare12 = index_of(c, "libcublasLt.so.12");
    const std::string sp = (venv / "lib" / "python3.12" / "site-packages").string();
    const size_t wheel13 = index_of(c, sp + "/nvidia/cu13/lib/libcublasLt.so.13");
    const size_t wheel12 = index_of(c, sp + "/nvidia/cublas/lib/libcublasLt.so.12");
    REQUIRE(root13 < c.size());
    REQUIRE(wheel13 < c.size());
    REQUIRE(wheel12 < c.size());
    CHECK(root13 < bare13);
    CHECK(bare13 < bare12);
    CHECK(bare12 < wheel13);
    CHECK(wheel13 < wheel12);
}
