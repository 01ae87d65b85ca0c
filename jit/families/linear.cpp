#include "jit/families/linear.hpp"

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"gemm"};
constexpr std::string_view k_outs[] = {"bf16", "f32"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(LinearConfig, block_m, 0, 128, "device: rows of y per CTA, 16/32/64/128 (default 64)"),
    KILN_CONFIG_FIELD(LinearConfig, block_n, 0, 128, "device: columns of y per CTA, 32/64/128 (default 64)"),
    KILN_CONFIG_FIELD(LinearConfig, warps_m, 0, 8, "device: warps along M (default 2)"),
    KILN_CONFIG_FIELD(LinearConfig, warps_n, 0, 8, "device: warps along N (default 2)"),
    KILN_CONFIG_CHOICE(LinearConfig, out, k_outs, "output type: bf16 or f32"),
};
}  // namespace

std::span<const ConfigField> LinearFamily::config_fields() const { return k_fields; }

KernelDescriptor LinearFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    dense::require_bf16(k_name, in);
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    const Config c = in.config.as<Config>();
    if (c.out > 1) throw InvalidArgument(fmt::format("linear: out={} must be bf16 (0) or f32 (1)", c.out));
    Config o;
    o.out = c.out;
    if (!in.target.is_host()) {
        if (in.target.arch < 80)
            throw InvalidArgument(fmt::format("linear: target {} has no bf16 mma.sync (sm_80 or newer)", to_string(in.target)));
        o.block_m = c.block_m ? c.block_m : 64;
        o.block_n = c.block_n ? c.block_n : 64;
        o.warps_m = c.warps_m ? c.warps_m : 2;
        o.warps_n = c.warps_n ? c.warps_n : 2;
        auto one_of = [](int v, std::initializer_list<int> ok) {
            for (int x : ok)
                if (v == x) return true;
            return false;
        };
        if (!one_of(o.block_m, {16, 32, 64, 128}))
            throw InvalidArgument(fmt::format("linear: block_m={} must be 16, 32, 64 or 128", o.block_m));
        if (!one_of(o.block_n, {32, 64, 128}))
            throw InvalidArgument(fmt::format("linear: block_n={} must be 32, 64 or 128", o.block_n));
        if (o.warps_m * o.warps_n > 16)
            throw InvalidArgument(fmt::format("linear: warps_m x warps_n = {} x {} is more than 16 warps", o.warps_m, o.warps_n));
        if (o.block_m % (16 * o.warps_m) != 0)
            throw InvalidArgument(fmt::format("linear: block_m={} is not a multiple of 16 x warps_m={}", o.block_m, o.warps_m));
        if (o.block_n % (8 * o.warps_n) != 0)
            throw InvalidArgument(fmt::format("linear: block_n={} is not a multiple of 8 x warps_n={}", o.block_n, o.warps_n));
    }
    d.config = KernelConfig::of(o);
    return d;
}

DeviceSource LinearFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    return dense::device_entry(d, "device/linear.cuh",
                               fmt::format("&kiln_dev::linear_mma_sync<{}, {}, {}, {}, {}>", c.block_m, c.block_n,
                                           c.warps_m, c.warps_n, c.out ? "true" : "false"));
}

HostSource LinearFamily::host_source(const KernelDescriptor& d) const {
    const bool f32 = d.config.as<Config>().out != 0;
    return dense::host_entry(d, "host/linear.hpp", f32 ? "kiln_linear_gemm_f32" : "kiln_linear_gemm_bf16",
                             "LinearParams", fmt::format("kiln_host::linear<{}>", f32 ? "true" : "false"));
}

KernelDescriptor LinearFamily::descriptor(LinearOut out, Target target, int block_m, int block_n, int warps_m,
                                          int warps_n) {
    KernelDescriptor d = dense::base(k_name, 0, k_modes, target);
    Config c;
    c.block_m = static_cast<uint16_t>(block_m);
    c.block_n = static_cast<uint16_t>(block_n);
    c.warps_m = static_cast<uint8_t>(warps_m);
    c.warps_n = static_cast<uint8_t>(warps_n);
    c.out = static_cast<uint8_t>(out);
    d.config = KernelConfig::of(c);
    return LinearFamily().canonicalize(d);
}

kiln_params::LinearParams linear_params(const LoadedKernel& k, const LinearArgs& a, Location where) {
    dense::expect_family(k, LinearFamily::k_name);
    const bool f32 = k.desc.config.as<LinearConfig>().out != 0;
    runtime::expect_tensor(a.x, "linear x", DType::bf16, 2, where);
    runtime::expect_tensor(a.w, "linear w", DType::bf16, 2, where);
    const int64_t M = a.x.shape[0], K = a.x.shape[1], N = a.w.shape[0];
    runtime::expect_shape(a.w, "linear w", {N, K});
    runtime::expect_tensor(a.y, "linear y", f32 ? DType::f32 : DType::bf16, 2, where);
    runtime::expect_shape(a.y, "linear y", {M, N});
    if (K % 8 != 0 || (reinterpret_cast<uintptr_t>(a.x.data) | reinterpret_cast<uintptr_t>(a.w.data)) % 16 != 0)
        throw InvalidArgument(fmt::format("linear: K={} must be a multiple of 8 and x, w 16-byte aligned", K));
    const int bm = k.desc.config.as<LinearConfig>().block_m;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || (bm && (M + bm - 1) / bm > 65535))
        throw InvalidArgument(fmt::format("linear: [{}, {}] x [{}, {}] is too large", M, K, N, K));
    kiln_params::LinearParams p{};
    p.x = a.x.ptr<const kiln_params::bf16>();
    p.w = a.w.ptr<const kiln_params::bf16>();
    if (f32) p.y_f32 = a.y.ptr<float>();
    else p.y_bf16 = a.y.ptr<kiln_params::bf16>();
    p.m = static_cast<int32_t>(M);
    p.n = static_cast<int32_t>(N);
    p.k = static_cast<int32_t>(K);
    return p;
}

void launch_linear(const LoadedKernel& k, runtime::Stream& stream, const LinearArgs& a) {
    const kiln_params::LinearParams p = linear_params(k, a, stream.backend().location());
    if (p.m == 0 || p.n == 0) return;
    if (p.k == 0) {  // an empty sum: y = 0
        stream.fill_u8(reinterpret_cast<uint64_t>(p.y_f32 ? static_cast<void*>(p.y_f32) : p.y_bf16), 0, a.y.bytes());
        return;
    }
    const LinearConfig c = k.desc.config.as<LinearConfig>();
    runtime::LaunchDims dims;
    if (c.block_m) {
        dims.block = {uint32_t(c.warps_m) * c.warps_n * 32u, 1, 1};
        dims.grid = {static_cast<uint32_t>((p.n + c.block_n - 1) / c.block_n),
                     static_cast<uint32_t>((p.m + c.block_m - 1) / c.block_m), 1};
    }
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
