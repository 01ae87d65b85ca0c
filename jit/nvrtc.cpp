#include "jit/nvrtc.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <semaphore>

#include <fmt/format.h>

#include "runtime/env.hpp"
#include "runtime/log.hpp"

namespace kiln::jit {

// NVRTC's C ABI, declared here so that building kiln does not need nvrtc.h.
using nvrtcProgramHandle = struct _nvrtcProgram*;
using nvrtcResultCode = int;

struct Nvrtc::Api {
    const char* (*GetErrorString)(nvrtcResultCode) = nullptr;
    nvrtcResultCode (*Version)(int*, int*) = nullptr;
    nvrtcResultCode (*GetNumSupportedArchs)(int*) = nullptr;
    nvrtcResultCode (*GetSupportedArchs)(int*) = nullptr;
    nvrtcResultCode (*CreateProgram)(nvrtcProgramHandle*, const char*, const char*, int, const char* const*,
                                     const char* const*) = nullptr;
    nvrtcResultCode (*DestroyProgram)(nvrtcProgramHandle*) = nullptr;
    nvrtcResultCode (*CompileProgram)(nvrtcProgramHandle, int, const char* const*) = nullptr;
    nvrtcResultCode (*GetCUBINSize)(nvrtcProgramHandle, size_t*) = nullptr;
    nvrtcResultCode (*GetCUBIN)(nvrtcProgramHandle, char*) = nullptr;
    nvrtcResultCode (*GetProgramLogSize)(nvrtcProgramHandle, size_t*) = nullptr;
    nvrtcResultCode (*GetProgramLog)(nvrtcProgramHandle, char*) = nullptr;
    nvrtcResultCode (*AddNameExpression)(nvrtcProgramHandle, const char*) = nullptr;
    nvrtcResultCode (*GetLoweredName)(nvrtcProgramHandle, const char*, const char**) = nullptr;
};

namespace {

std::atomic<bool> g_loaded{false};

template <typename Fn>
void sym(void* h, const char* name, Fn& out, std::string& missing) {
    out = reinterpret_cast<Fn>(dlsym(h, name));
    if (out == nullptr) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
}

std::counting_semaphore<64>& compile_slots() {
    static std::counting_semaphore<64> sem(max_parallel_compiles());
    return sem;
}

}  // namespace

int max_parallel_compiles() {
    int64_t n = env::get_int("KILN_JIT_MAX_PARALLEL", 4);
    return static_cast<int>(std::clamp<int64_t>(n, 1, 64));
}

Nvrtc& Nvrtc::instance() {
    // A failed load is not cached: a later call (after the user fixes the environment) retries.
    static std::mutex mu;
    static Nvrtc* inst = nullptr;
    std::lock_guard<std::mutex> lock(mu);
    if (inst == nullptr) {
        inst = new Nvrtc();  // lives for the whole process, like the library it wraps
        g_loaded.store(true, std::memory_order_release);
    }
    return *inst;
}

bool Nvrtc::is_loaded() { return g_loaded.load(std::memory_order_acquire); }

Nvrtc::Nvrtc() {
    std::vector<std::string> cands = nvrtc_library_candidates();
    void* h = nullptr;
    std::string errors;
    for (const std::string& c : cands) {
        h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h != nullptr) {
            path_ = c;
            break;
        }
    }
    if (h == nullptr) {
        std::string tried;
        for (const auto& c : cands) tried += fmt::format("{}{}", tried.empty() ? "" : ", ", c);
        throw ToolkitNotFound(fmt::format(
            "NVRTC (libnvrtc.so.13) not found; tried: {}. Set KILN_CUDA_HOME to a CUDA 13 toolkit or install the "
            "nvidia-cuda-nvrtc wheel (scripts/setup does)",
            tried));
    }
    auto* a = new Api();  // never freed: NVRTC stays loaded
    std::string missing;
    sym(h, "nvrtcGetErrorString", a->GetErrorString, missing);
    sym(h, "nvrtcVersion", a->Version, missing);
    sym(h, "nvrtcGetNumSupportedArchs", a->GetNumSupportedArchs, missing);
    sym(h, "nvrtcGetSupportedArchs", a->GetSupportedArchs, missing);
    sym(h, "nvrtcCreateProgram", a->CreateProgram, missing);
    sym(h, "nvrtcDestroyProgram", a->DestroyProgram, missing);
    sym(h, "nvrtcCompileProgram", a->CompileProgram, missing);
    sym(h, "nvrtcGetCUBINSize", a->GetCUBINSize, missing);
    sym(h, "nvrtcGetCUBIN", a->GetCUBIN, missing);
    sym(h, "nvrtcGetProgramLogSize", a->GetProgramLogSize, missing);
    sym(h, "nvrtcGetProgramLog", a->GetProgramLog, missing);
    sym(h, "nvrtcAddNameExpression", a->AddNameExpression, missing);
    sym(h, "nvrtcGetLoweredName", a->GetLoweredName, missing);
    if (!missing.empty())
        throw ToolkitNotFound(fmt::format("NVRTC at {} lacks {}", path_, missing));
    if (a->Version(&major_, &minor_) != 0) throw ToolkitNotFound(fmt::format("nvrtcVersion failed ({})", path_));
    api_ = a;
    log::debug("NVRTC {}.{} from {}", major_, minor_, path_);
}

std::string Nvrtc::identity() const { return fmt::format("nvrtc-{}.{}", major_, minor_); }

std::vector<int> Nvrtc::supported_archs() const {
    int n = 0;
    if (api_->GetNumSupportedArchs(&n) != 0 || n <= 0) return {};
    std::vector<int> v(n);
    api_->GetSupportedArchs(v.data());
    return v;
}

NvrtcOutput Nvrtc::compile(const NvrtcProgram& p) const {
    const Api& a = *api_;
    std::vector<const char*> hdr, names;
    for (const auto& [name, text] : p.headers) {
        names.push_back(name.c_str());
        hdr.push_back(text.c_str());
    }
    auto fail = [&](const std::string& step, nvrtcResultCode r) {
        return CompileError(fmt::format("NVRTC {} failed for {}: {}", step, p.file_name, a.GetErrorString(r)), "");
    };

    compile_slots().acquire();
    struct Release {
        ~Release() { compile_slots().release(); }
    } release;

    nvrtcProgramHandle prog = nullptr;
    nvrtcResultCode r = a.CreateProgram(&prog, p.source.c_str(), p.file_name.c_str(), static_cast<int>(hdr.size()),
                                        hdr.data(), names.data());
    if (r != 0) throw fail("nvrtcCreateProgram", r);
    struct Destroy {
        const Api& a;
        nvrtcProgramHandle& p;
        ~Destroy() { a.DestroyProgram(&p); }
    } destroy{a, prog};

    if ((r = a.AddNameExpression(prog, p.name_expr.c_str())) != 0) throw fail("nvrtcAddNameExpression", r);
    std::vector<const char*> opts;
    for (const auto& o : p.options) opts.push_back(o.c_str());

    auto t0 = std::chrono::steady_clock::now();
    nvrtcResultCode cr = a.CompileProgram(prog, static_cast<int>(opts.size()), opts.data());
    auto t1 = std::chrono::steady_clock::now();

    NvrtcOutput out;
    out.compile_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    size_t log_size = 0;
    if (a.GetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
        out.log.resize(log_size);
        a.GetProgramLog(prog, out.log.data());
        while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
    }
    if (cr != 0) {
        std::string opt_text;
        for (const auto& o : p.options) opt_text += " " + o;
        throw CompileError(fmt::format("NVRTC failed to compile {} ({}): {}\noptions:{}\n{}", p.file_name, p.name_expr,
                                       a.GetErrorString(cr), opt_text, out.log),
                           out.log);
    }
    size_t n = 0;
    if ((r = a.GetCUBINSize(prog, &n)) != 0) throw fail("nvrtcGetCUBINSize", r);
    if (n == 0) throw CompileError(fmt::format("NVRTC produced no cubin for {} (is the target a real sm_ arch?)", p.file_name), out.log);
    out.cubin.resize(n);
    if ((r = a.GetCUBIN(prog, reinterpret_cast<char*>(out.cubin.data()))) != 0) throw fail("nvrtcGetCUBIN", r);
    const char* lowered = nullptr;
    if ((r = a.GetLoweredName(prog, p.name_expr.c_str(), &lowered)) != 0 || lowered == nullptr)
        throw fail("nvrtcGetLoweredName", r);
    out.lowered_name = lowered;
    return out;
}

std::vector<std::string> canonical_options(const Target& target) {
    if (target.is_host()) throw InvalidArgument("NVRTC compiles device targets only (got host)");
    std::vector<std::string> o = {
        fmt::format("--gpu-architecture={}", to_string(target)),
        "--std=c++17",
        "-default-device",
        "--modify-stack-limit=false",
        "--frandom-seed=kiln",  // deterministic cubins: reproducible prebuilt caches
        "-I<cuda-include>",
        "-I<cccl-include>",
    };
    // Source lines in the cubin for profilers (still optimised; the option is in the key, so these cubins are
    // cached apart from the others).
    if (env::get_bool("KILN_JIT_LINEINFO", false)) o.push_back("--generate-line-info");
    return o;
}

std::vector<std::string> realize(const std::vector<std::string>& canonical, const CudaHeaders& h) {
    std::vector<std::string> out;
    out.reserve(canonical.size());
    for (const std::string& o : canonical) {
        if (o == "-I<cuda-include>") out.push_back("-I" + h.include);
        else if (o == "-I<cccl-include>") out.push_back("-I" + h.cccl);
        else out.push_back(o);
    }
    return out;
}

}  // namespace kiln::jit
