#include "autotune/sku.hpp"

#include <unistd.h>

#include <fstream>
#include <string_view>

#include <fmt/format.h>

#include "jit/nvrtc.hpp"
#include "kiln_config.h"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/error.hpp"
#if KILN_HAVE_HOST_JIT
#include "jit/host_compiler.hpp"
#endif

namespace kiln::autotune {

namespace {

std::string gib_text(uint64_t bytes) {
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / static_cast<double>(uint64_t(1) << 30));
}

std::string nvrtc_version() {
    try {
        jit::Nvrtc& n = jit::Nvrtc::instance();
        return fmt::format("{}.{}", n.major(), n.minor());
    } catch (const Error&) {
        return "";
    }
}

// "model name : ..." of the first processor in /proc/cpuinfo, else "".
std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) != 0 && line.rfind("Model", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string v = line.substr(colon + 1);
        const size_t b = v.find_first_not_of(" \t");
        return b == std::string::npos ? "" : v.substr(b);
    }
    return "";
}

uint64_t sysfs_size(const char* path) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text.empty()) return 0;
    uint64_t mult = 1;
    if (text.back() == 'K') mult = 1024, text.pop_back();
    else if (text.back() == 'M') mult = uint64_t(1) << 20, text.pop_back();
    try {
        return std::stoull(text) * mult;
    } catch (const std::exception&) {
        return 0;
    }
}

}  // namespace

std::string SkuIdentity::summary() const {
    return fmt::format("{} {}, {} {}, {}, {}", kind, name, compute_units, kind == "cuda" ? "SMs" : "threads",
                       gib_text(memory_bytes), target);
}

std::string SkuIdentity::difference(const SkuIdentity& o) const {
    if (kind != o.kind) return fmt::format("target kind {} vs {}", kind, o.kind);
    if (name != o.name) return fmt::format("device '{}' vs '{}'", name, o.name);
    if (compute_units != o.compute_units)
        return fmt::format("{} {} vs {}", kind == "cuda" ? "SM count" : "worker threads", compute_units, o.compute_units);
    if (memory_bytes != o.memory_bytes)
        return fmt::format("memory {} vs {}", gib_text(memory_bytes), gib_text(o.memory_bytes));
    if (target != o.target) return fmt::format("target {} vs {}", target, o.target);
    return "";
}

SkuIdentity host_sku(int threads) {
    SkuIdentity s;
    s.kind = "host";
    s.name = cpu_model_name();
    if (s.name.empty()) s.name = "unknown CPU";
    s.compute_units = threads;
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    s.memory_bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
    // Physical memory as the kernel reports it moves by a few pages between boots: the SKU compares GiB.
    s.memory_bytes = s.memory_bytes >> 30 << 30;
    s.cache_bytes = sysfs_size("/sys/devices/system/cpu/cpu0/cache/index3/size");
    if (s.cache_bytes == 0) s.cache_bytes = sysfs_size("/sys/devices/system/cpu/cpu0/cache/index2/size");
#if KILN_HAVE_HOST_JIT
    s.target = jit::HostTarget::detect().name();
    s.llvm = KILN_LLVM_VERSION;
#else
    s.target = "host";
#endif
    s.nvrtc = nvrtc_version();
    return s;
}

SkuIdentity cuda_sku(int ordinal) {
    const runtime::DeviceProps p = runtime::device_props(ordinal);
    SkuIdentity s;
    s.kind = "cuda";
    s.name = p.name;
    s.compute_units = p.sm_count;
    s.memory_bytes = p.total_memory;
    s.target = p.target();
    s.clock_khz = p.clock_khz;
    s.cache_bytes = static_cast<uint64_t>(p.l2_bytes);
    const runtime::DriverStatus& ds = runtime::driver_status();
    s.driver = ds.driver_version ? runtime::format_cuda_version(ds.driver_version) : "";
    s.nvrtc = nvrtc_version();
#if KILN_HAVE_HOST_JIT
    s.llvm = KILN_LLVM_VERSION;
#endif
    return s;
}

SkuIdentity detect_sku(const runtime::Backend& backend, int device) {
    if (backend.kind() == runtime::BackendKind::cuda) return cuda_sku(device);
    return host_sku(backend.compute_units());
}

}  // namespace kiln::autotune
