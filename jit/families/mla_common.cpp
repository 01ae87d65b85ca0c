#include "jit/families/mla_common.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::jit::mla {

KernelDescriptor base_descriptor(std::string_view family, std::string_view mode, Target target) {
    KernelDescriptor d;
    d.family = ShortName(family);
    d.mode = ShortName(mode);
    d.target = target;
    d.act_dtype = runtime::DType::bf16;
    return d;
}

KernelDescriptor canonical_start(std::string_view family, const KernelDescriptor& in,
                                 std::initializer_list<std::string_view> modes) {
    std::string names;
    bool known = false;
    for (std::string_view m : modes) {
        names += fmt::format("{}{}", names.empty() ? "" : ", ", m);
        known = known || in.mode.view() == m;
    }
    if (in.mode.empty() && modes.size() != 1)
        throw InvalidArgument(fmt::format("{}: a mode is required (modes: {})", family, names));
    if (!in.mode.empty() && !known)
        throw InvalidArgument(fmt::format("{}: unknown mode '{}' (modes: {})", family, in.mode.view(), names));
    if (!in.target.is_host() && in.target.arch < 80)
        throw InvalidArgument(fmt::format("{}: target {} is not supported (needs sm_80 or newer: cp.async, bf16 "
                                          "arithmetic)",
                                          family, to_string(in.target)));
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument(fmt::format("{}: takes bf16 weights only (weight format must be none)", family));
    if (in.act_dtype != runtime::DType::none && in.act_dtype != runtime::DType::bf16)
        throw InvalidArgument(fmt::format("{}: activations must be bf16", family));
    return base_descriptor(family, in.mode.empty() ? *modes.begin() : in.mode.view(), in.target);
}

void take_attention_dims(std::string_view family, const KernelDescriptor& in, KernelDescriptor& d) {
    if (in.n < 64 || in.n > k_max_latent || in.n % 64 != 0)
        throw InvalidArgument(fmt::format("{}: n={} (kv_lora_rank, d_c) must be a multiple of 64 in [64, {}]", family,
                                          in.n, k_max_latent));
    if (in.k < 8 || in.k > k_max_rope || in.k % 8 != 0)
        throw InvalidArgument(fmt::format("{}: k={} (qk_rope_head_dim, d_r) must be a multiple of 8 in [8, {}]", family,
                                          in.k, k_max_rope));
    d.n = in.n;
    d.k = in.k;
}

uint32_t attention_smem(int d_c, int d_r, int rows) {
    const int cd = d_c + d_r;
    return static_cast<uint32_t>(rows * cd * 4 + 2 * k_key_tile * (cd + 8) * 2);
}

uint32_t attention_mma_smem(int d_c, int d_r) {
    const int qs = d_c + d_r + 8, ps = 64 + 8;
    return static_cast<uint32_t>(k_mma_rows * qs * 2 + 2 * 64 * qs * 2 + k_mma_rows * ps * 2 + 2 * 4 * k_mma_rows * 4);
}

}  // namespace kiln::jit::mla
