#include "jit/cuda_toolkit.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "runtime/env.hpp"

namespace kiln::jit {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> toolkit_roots() {
    std::vector<std::string> roots;
    for (const char* var : {"KILN_CUDA_HOME", "CUDA_HOME"})
        if (auto v = env::get(var)) roots.push_back(*v);
    roots.push_back("/usr/local/cuda");
    return roots;
}

// site-packages / dist-packages directories that may hold NVIDIA's wheels.
std::vector<fs::path> python_package_dirs() {
    std::vector<fs::path> venvs;
    if (auto v = env::get("VIRTUAL_ENV")) venvs.emplace_back(*v);
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        fs::path dir = exe.parent_path();
        for (int up = 0; up < 5 && !dir.empty(); ++up) {
            venvs.push_back(dir / ".venv");
            if (dir == dir.parent_path()) break;
            dir = dir.parent_path();
        }
    }
    std::vector<fs::path> out;
    auto add_glob = [&](const fs::path& lib_dir, const char* leaf) {
        if (!fs::is_directory(lib_dir, ec)) return;
        std::vector<fs::path> found;
        for (const auto& entry : fs::directory_iterator(lib_dir, ec)) {
            std::string name = entry.path().filename().string();
            if (name.rfind("python3", 0) == 0 && fs::is_directory(entry.path() / leaf, ec)) found.push_back(entry.path() / leaf);
        }
        std::sort(found.begin(), found.end());
        out.insert(out.end(), found.begin(), found.end());
    };
    for (const fs::path& v : venvs) add_glob(v / "lib", "site-packages");
    add_glob("/usr/local/lib", "dist-packages");
    add_glob("/usr/local/lib", "site-packages");
    if (fs::is_directory("/usr/lib/python3/dist-packages", ec)) out.emplace_back("/usr/lib/python3/dist-packages");
    if (auto home = env::get("HOME")) add_glob(fs::path(*home) / ".local" / "lib", "site-packages");
    return out;
}

int read_cuda_version(const fs::path& cuda_h) {
    std::ifstream in(cuda_h);
    std::string line;
    static const std::regex re(R"(^\s*#\s*define\s+CUDA_VERSION\s+(\d+))");
    std::smatch m;
    while (std::getline(in, line))
        if (std::regex_search(line, m, re)) return std::stoi(m[1]);
    return 0;
}

}  // namespace

std::vector<std::string> nvrtc_library_candidates() {
    std::vector<std::string> out;
    for (const std::string& r : toolkit_roots())
        for (const char* lib : {"lib64", "lib"}) out.push_back((fs::path(r) / lib / "libnvrtc.so.13").string());
    out.push_back("libnvrtc.so.13");
    for (const fs::path& sp : python_package_dirs()) out.push_back((sp / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13").string());
    // Deduplicate, keeping the first occurrence.
    std::vector<std::string> uniq;
    for (auto& c : out)
        if (std::find(uniq.begin(), uniq.end(), c) == uniq.end()) uniq.push_back(c);
    return uniq;
}

CudaHeaders locate_cuda_headers() {
    std::vector<fs::path> includes;
    for (const std::string& r : toolkit_roots()) includes.push_back(fs::path(r) / "include");
    for (const fs::path& sp : python_package_dirs()) includes.push_back(sp / "nvidia" / "cu13" / "include");
    std::error_code ec;
    std::string tried;
    bool saw_bf16 = false;
    for (const fs::path& inc : includes) {
        tried += fmt::format("{}{}", tried.empty() ? "" : ", ", inc.string());
        if (!fs::is_regular_file(inc / "cuda_bf16.h", ec)) continue;
        saw_bf16 = true;
        for (const fs::path& cccl : {inc / "cccl", inc}) {
            if (fs::is_regular_file(cccl / "cuda" / "std" / "cstdint", ec)) {
                CudaHeaders h;
                h.include = fs::weakly_canonical(inc, ec).string();
                h.cccl = fs::weakly_canonical(cccl, ec).string();
                h.cuda_version = read_cuda_version(inc / "cuda.h");
                return h;
            }
        }
    }
    if (saw_bf16)
        throw ToolkitNotFound(fmt::format(
            "CUDA headers incomplete: found cuda_bf16.h but not CCCL (cuda/std/cstdint in <include>/cccl) in: {}. "
            "Install the CUDA toolkit's CCCL or the nvidia-cuda-cccl wheel, or set KILN_CUDA_HOME",
            tried));
    throw ToolkitNotFound(fmt::format(
        "CUDA headers not found: NVRTC needs cuda_bf16.h and CCCL (cuda/std/cstdint); looked in: {}. "
        "Set KILN_CUDA_HOME to a CUDA 13 toolkit, or install the nvidia-cuda-runtime and nvidia-cuda-cccl wheels",
        tried));
}

}  // namespace kiln::jit
