// Where kernels run: the CUDA device or the host target. KILN_TARGET (or `kiln --target`) picks
// host, cuda or auto (the default: the GPU when a CUDA device is usable, else the host).
// Serving code asks exec_target() once and then talks to streams and kernels the same way on both.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "runtime/backend.hpp"

namespace kiln::runtime {

using ExecTarget = BackendKind;
enum class TargetPreference { auto_select, cuda, host };

const char* to_string(TargetPreference p);  // "auto", "cuda", "host"
// "host", "cuda" or "auto" (case-insensitive); anything else throws InvalidArgument.
TargetPreference parse_target_preference(std::string_view s);

// The process-wide preference: set_target_preference() (the CLI's --target), else KILN_TARGET,
// else auto.
TargetPreference target_preference();
void set_target_preference(TargetPreference p);

// Resolves a preference. auto: cuda when a CUDA device is usable, else host. cuda without a device
// throws NoDevice; host in a kiln built without the host JIT throws InvalidArgument (GPU-only
// bundle). `why` (optional) receives a short explanation, e.g. "auto: no CUDA device".
ExecTarget resolve_exec_target(TargetPreference p, std::string* why = nullptr);
ExecTarget exec_target(std::string* why = nullptr);  // resolve_exec_target(target_preference())

// True when this kiln can run kernels on the host target (built with host_jit).
bool host_target_available();

// The backend of a target (device ordinal `device` for cuda); throws NoDevice without a device.
std::unique_ptr<Backend> make_backend(ExecTarget t, int device = 0);

}  // namespace kiln::runtime
