// NVRTC, reached through dlopen("libnvrtc.so.13") (see jit/cuda_toolkit.hpp for where it is looked
// for): compiles one translation unit to a cubin for one device target.
//
// - kiln templates are handed to NVRTC as in-memory headers (their names as included), so no kiln path
//   appears in any option; the CUDA headers come in through -I<cuda-include> and -I<cccl-include>.
// - canonical_options(target) is the option list in a fixed order with the include directories
//   written symbolically; that form goes into content keys. realize() substitutes the real paths.
// - At most KILN_JIT_MAX_PARALLEL (default 4) compiles run at once in a process (each NVRTC instance
//   takes a few hundred MB).
// - A failed compile throws CompileError carrying NVRTC's log.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "jit/cuda_toolkit.hpp"
#include "jit/descriptor.hpp"

namespace kiln::jit {

class CompileError : public Error {
public:
    CompileError(const std::string& what, std::string log) : Error(what), log_(std::move(log)) {}
    const std::string& log() const { return log_; }

private:
    std::string log_;
};

struct NvrtcProgram {
    std::string file_name;
    std::string source;
    std::vector<std::pair<std::string, std::string>> headers;  // include name -> contents
    std::string name_expr;
    std::vector<std::string> options;  // real options (see realize())
};

struct NvrtcOutput {
    std::vector<uint8_t> cubin;
    std::string lowered_name;  // the symbol to pass to cuLibraryGetKernel
    std::string log;           // warnings, if any
    double compile_ms = 0;     // nvrtcCompileProgram wall time (excludes waiting for a compile slot)
};

class Nvrtc {
public:
    // Loads NVRTC on first call; throws ToolkitNotFound naming every place it looked.
    static Nvrtc& instance();
    // True once instance() has loaded NVRTC in this process (never loads it).
    static bool is_loaded();

    int major() const { return major_; }
    int minor() const { return minor_; }
    std::string identity() const;  // "nvrtc-13.0"
    const std::string& library_path() const { return path_; }
    std::vector<int> supported_archs() const;  // e.g. {75, 80, ..., 90, 100, ...}

    // Throws CompileError (with the log) on failure.
    NvrtcOutput compile(const NvrtcProgram& p) const;

    Nvrtc(const Nvrtc&) = delete;
    Nvrtc& operator=(const Nvrtc&) = delete;

private:
    Nvrtc();
    struct Api;
    const Api* api_ = nullptr;
    std::string path_;
    int major_ = 0, minor_ = 0;
};

// Option list for a device target, symbolic include dirs ("-I<cuda-include>", "-I<cccl-include>").
std::vector<std::string> canonical_options(const Target& target);
// The same list with the real header directories.
std::vector<std::string> realize(const std::vector<std::string>& canonical, const CudaHeaders& h);

// Maximum concurrent compiles: KILN_JIT_MAX_PARALLEL, default 4, clamped to [1, 64].
int max_parallel_compiles();

}  // namespace kiln::jit
