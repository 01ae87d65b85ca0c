#include "jit/families/attn_res.hpp"

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"mix"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(AttnResConfig, threads, 0, 1024, "device CTA threads, one CTA per row (default 256)"),
};
}  // namespace

std::span<const ConfigField> AttnResFamily::config_fields() const { return k_fields; }

KernelDescriptor AttnResFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    dense::require_bf16(k_name, in);
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    Config c;
    c.threads = dense::threads(k_name, in.config.as<Config>().threads, 256, in.target);
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource AttnResFamily::device_source(const KernelDescriptor& d) const {
    return dense::device_entry(d, "device/attn_res.cuh",
                               fmt::format("&kiln_dev::attn_res<{}>", d.config.as<Config>().threads));
}

HostSource AttnResFamily::host_source(const KernelDescriptor& d) const {
    return dense::host_entry(d, "host/attn_res.hpp", "kiln_attn_res_mix", "AttnResParams", "kiln_host::attn_res");
}

KernelDescriptor AttnResFamily::descriptor(Target target, int threads) {
    KernelDescriptor d = dense::base(k_name, 0, k_modes, target);
    Config c;
    c.threads = static_cast<uint16_t>(threads);
    d.config = KernelConfig::of(c);
    return AttnResFamily().canonicalize(d);
}

kiln_params::AttnResParams attn_res_params(const LoadedKernel& k, const AttnResArgs& a, Location where) {
    dense::expect_family(k, AttnResFamily::k_name);
    runtime::expect_tensor(a.current, "attn_res current", DType::bf16, 2, where);
    const int64_t rows = a.current.shape[0], dim = a.current.shape[1];
    runtime::expect_tensor(a.out, "attn_res out", DType::bf16, 2, where);
    runtime::expect_shape(a.out, "attn_res out", {rows, dim});
    runtime::expect_tensor(a.score, "attn_res score", DType::f32, 1, where);
    runtime::expect_shape(a.score, "attn_res score", {dim});
    if (a.blocks < 0 || a.blocks + 1 > AttnResFamily::k_max_candidates)
        throw InvalidArgument(fmt::format("attn_res: {} banked blocks (at most {} candidates in all)", a.blocks,
                                          AttnResFamily::k_max_candidates));
    kiln_params::AttnResParams p{};
    if (a.blocks > 0) {
        runtime::expect_tensor(a.bank, "attn_res bank", DType::bf16, 3, where);
        if (a.bank.shape[0] < a.blocks || a.bank.shape[1] < rows || a.bank.shape[2] != dim)
            throw InvalidArgument(fmt::format("attn_res: bank {} cannot hold {} blocks of [{}, {}]", a.bank.describe(),
                                              a.blocks, rows, dim));
        p.bank = a.bank.ptr<const kiln_params::bf16>();
        p.block_stride = a.bank.strides[0];
    }
    if (rows > INT32_MAX || dim > INT32_MAX) throw InvalidArgument("attn_res: too many rows");
    if (!(a.eps > 0.0f)) throw InvalidArgument(fmt::format("attn_res: eps={} must be positive", a.eps));
    p.current = a.current.ptr<const kiln_params::bf16>();
    p.score = a.score.ptr<const float>();
    p.out = a.out.ptr<kiln_params::bf16>();
    p.blocks = a.blocks;
    p.rows = static_cast<int32_t>(rows);
    p.dim = static_cast<int32_t>(dim);
    p.eps = a.eps;
    return p;
}

void launch_attn_res(const LoadedKernel& k, runtime::Stream& stream, const AttnResArgs& a) {
    const kiln_params::AttnResParams p = attn_res_params(k, a, stream.backend().location());
    if (p.rows == 0) return;
    const uint32_t t = k.desc.config.as<AttnResConfig>().threads;
    runtime::LaunchDims dims;
    dims.block = {t ? t : 1, 1, 1};
    dims.grid = {static_cast<uint32_t>(p.rows), 1, 1};
    stream.launch(k.handle, dims, p);
}

std::vector<float> attn_res_fold(const std::vector<float>& norm, const std::vector<float>& proj) {
    if (norm.size() != proj.size())
        throw InvalidArgument(fmt::format("attn_res: norm has {} values, proj {}", norm.size(), proj.size()));
    std::vector<float> out(norm.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(double(norm[i]) * double(proj[i]));
    return out;
}

}  // namespace kiln::jit
