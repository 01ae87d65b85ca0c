// What the dense families (rmsnorm, glu, embedding, attn_res, router, linear, sample) share: the mode
// check of canonicalize, the CTA size field, the host entry translation unit and the kernel check of a
// launch. Not a family.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "jit/descriptor.hpp"
#include "jit/family.hpp"
#include "jit/loaded_kernel.hpp"

namespace kiln::jit::dense {

// The index of in.mode among `modes` (an empty mode is the first); throws InvalidArgument naming the
// family and the modes it has.
int mode_index(std::string_view family, const KernelDescriptor& in, std::span<const std::string_view> modes);
// A descriptor of `family` in mode `modes[mode]` on `target` (the other fields zero).
KernelDescriptor base(std::string_view family, int mode, std::span<const std::string_view> modes, Target target);
// Device CTA threads: `value` (0: `def`) must be a multiple of 32 in [32, max]; 0 on the host target.
uint16_t threads(std::string_view family, int value, int def, const Target& t, int max = 1024);
// Only bf16 activations (none means bf16).
void require_bf16(std::string_view family, const KernelDescriptor& in);
// extern "C" entry `entry` that guards the context and calls `call` with the params struct `params`.
HostSource host_entry(const KernelDescriptor& d, std::string_view header, std::string_view entry,
                      std::string_view params, std::string_view call, uint64_t scratch = 0);
DeviceSource device_entry(const KernelDescriptor& d, std::string_view header, std::string name_expr);
// Throws InvalidArgument unless `k` is a kernel of `family`.
void expect_family(const LoadedKernel& k, std::string_view family);

}  // namespace kiln::jit::dense
