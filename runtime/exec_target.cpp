#include "runtime/exec_target.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>

#include <fmt/format.h>

#include "kiln_config.h"
#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"
#include "runtime/host/stream.hpp"

namespace kiln::runtime {

namespace {
// -1: not set explicitly (read KILN_TARGET).
std::atomic<int> g_pref{-1};
}  // namespace

const char* to_string(TargetPreference p) {
    switch (p) {
        case TargetPreference::cuda: return "cuda";
        case TargetPreference::host: return "host";
        case TargetPreference::auto_select: return "auto";
    }
    return "auto";
}

TargetPreference parse_target_preference(std::string_view s) {
    std::string l(s);
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == "auto") return TargetPreference::auto_select;
    if (l == "cuda") return TargetPreference::cuda;
    if (l == "host") return TargetPreference::host;
    throw InvalidArgument(fmt::format("'{}' is not an execution target (expected host, cuda or auto)", s));
}

TargetPreference target_preference() {
    int p = g_pref.load();
    if (p >= 0) return static_cast<TargetPreference>(p);
    auto v = env::get("KILN_TARGET");
    if (!v) return TargetPreference::auto_select;
    try {
        return parse_target_preference(*v);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("KILN_TARGET={}: {}", *v, e.what()));
    }
}

void set_target_preference(TargetPreference p) { g_pref.store(static_cast<int>(p)); }

bool host_target_available() { return KILN_HAVE_HOST_JIT != 0; }

ExecTarget resolve_exec_target(TargetPreference p, std::string* why) {
    auto say = [&](std::string s) {
        if (why) *why = std::move(s);
    };
    auto host = [&]() {
        if (!host_target_available())
            throw InvalidArgument("this kiln was built without the host JIT (-Dhost_jit=disabled): "
                                  "it runs kernels on a CUDA device only");
        return ExecTarget::host;
    };
    switch (p) {
        case TargetPreference::host:
            say("host: requested");
            return host();
        case TargetPreference::cuda:
            if (device_count() == 0)
                throw NoDevice("target cuda requested (KILN_TARGET / --target) but no CUDA device is usable");
            say("cuda: requested");
            return ExecTarget::cuda;
        case TargetPreference::auto_select:
            break;
    }
    if (device_count() > 0) {
        say("auto: CUDA device found");
        return ExecTarget::cuda;
    }
    if (!host_target_available())
        throw NoDevice("no CUDA device is usable and this kiln was built without the host JIT (-Dhost_jit=disabled)");
    say("auto: no CUDA device");
    return ExecTarget::host;
}

ExecTarget exec_target(std::string* why) { return resolve_exec_target(target_preference(), why); }

std::unique_ptr<Backend> make_backend(ExecTarget t, int device) {
    if (t == ExecTarget::cuda) return std::make_unique<CudaBackend>(device);
    return std::make_unique<HostBackend>();
}

}  // namespace kiln::runtime
