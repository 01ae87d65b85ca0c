// Helpers shared by the cache tests: scratch directories and artifacts with random (never all-zero)
// blobs. Artifacts go into stores through the real Store::put.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "cache/content_key.hpp"
#include "cache/store.hpp"
#include "tests/common/sandbox.hpp"

namespace kiln::cache::test {

namespace fs = std::filesystem;

using kiln::test::TempDir;

inline std::vector<uint8_t> random_bytes(uint64_t seed, size_t n) {
    std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng() | 1);  // never zero
    return v;
}

inline Artifact make_artifact(uint64_t seed, size_t size = 4096, ArtifactKind kind = ArtifactKind::cubin,
                              const std::string& family = "gemv_bf16") {
    Artifact a;
    a.info.key = KeyBuilder().field("test-seed", static_cast<int64_t>(seed)).field("family", family).finish();
    a.info.kind = kind;
    a.info.family = family;
    a.info.mode = "dense";
    a.info.m = 8;
    a.info.n = 4096 + static_cast<int64_t>(seed);
    a.info.k = 7168;
    a.info.experts = 0;
    a.info.weight_format = "int4_g32_bf16";
    a.info.act_dtype = "bf16";
    a.info.target = kind == ArtifactKind::cubin ? "sm_90a" : "host-x86_64-linux-gnu-znver4";
    a.info.config = "bm=8,bn=256,bk=64,st=4";
    a.info.kernel_name = "kiln_gemv_" + std::to_string(seed);
    a.info.compiler = kind == ArtifactKind::cubin ? "nvrtc-13.0" : "llvm-14.0.6";
    a.info.compile_ms = 123.5 + static_cast<double>(seed);
    a.blob = random_bytes(seed, size);
    return a;
}

inline StoreOptions options_in(const TempDir& dir, const std::string& sub = "user") {
    StoreOptions o;
    o.cache_dir = dir / sub;
    o.max_bytes = 1ull << 30;
    return o;
}

inline bool contains(const std::vector<std::string>& messages, const std::string& needle) {
    for (const auto& m : messages)
        if (m.find(needle) != std::string::npos) return true;
    return false;
}

inline std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void spit(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace kiln::cache::test
