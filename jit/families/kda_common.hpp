// What the KDA families (kda_prep, kda_chunk, kda_decode, kda_out_norm) share: the descriptor's mode
// ("varlen") and head dimension, and the device targets they are built for.
#pragma once

#include <string_view>

#include <fmt/format.h>

#include "jit/descriptor.hpp"
#include "runtime/error.hpp"

namespace kiln::jit::kda {

// Head dims (K = V) the KDA kernels are instantiated for: a lane owns K / 32 channels.
inline bool supported_head_dim(int k) { return k == 32 || k == 64 || k == 128; }

inline KernelDescriptor base_descriptor(std::string_view family, int head_dim, Target target) {
    KernelDescriptor d;
    d.family = ShortName(family);
    d.mode = ShortName("varlen");
    d.k = head_dim;
    d.target = target;
    return d;
}

// Mode, head dim, target and the absence of weights / M / N; returns the canonical start (config zero).
inline KernelDescriptor canonical_start(std::string_view family, const KernelDescriptor& in) {
    if (!in.mode.empty() && in.mode.view() != "varlen")
        throw InvalidArgument(fmt::format("{}: unknown mode '{}' (modes: varlen)", family, in.mode.view()));
    if (!supported_head_dim(in.k))
        throw InvalidArgument(fmt::format("{}: k={} (the head dim) must be 32, 64 or 128", family, in.k));
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument(fmt::format("{}: takes no quantised weights (weight format must be none)", family));
    if (!in.target.is_host() && in.target.arch < 90)
        throw InvalidArgument(fmt::format("{}: target {} is not supported (sm_90 or newer: the chunk kernel's shared "
                                          "memory)",
                                          family, to_string(in.target)));
    KernelDescriptor d = base_descriptor(family, in.k, in.target);
    d.act_dtype = runtime::DType::f32;
    return d;
}

}  // namespace kiln::jit::kda
