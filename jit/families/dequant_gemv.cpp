#include "jit/families/dequant_gemv.hpp"

#include <fmt/format.h>

#include "common/dequant_gemv_params.h"
#include "runtime/bf16.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

static constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(DequantGemvConfig, warps, 0, 32, "output rows per CTA, one per warp (device; default 8)"),
};

std::span<const ConfigField> DequantGemvFamily::config_fields() const { return k_fields; }

KernelDescriptor DequantGemvFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d;
    d.family = ShortName(k_name);
    if (in.mode.empty()) d.mode = ShortName("dense");
    else if (in.mode.view() != "dense")
        throw InvalidArgument(fmt::format("dequant_gemv: unknown mode '{}' (modes: dense)", in.mode.view()));
    else d.mode = in.mode;
    if (in.m < 1 || in.m > k_max_m)
        throw InvalidArgument(fmt::format("dequant_gemv: m={} (the M-bucket) must be in [1, {}]", in.m, k_max_m));
    if (in.n < 1) throw InvalidArgument(fmt::format("dequant_gemv: n={} must be positive", in.n));
    if (in.k < 32 || in.k % 32 != 0)
        throw InvalidArgument(fmt::format("dequant_gemv: k={} must be a positive multiple of the group size 32", in.k));
    if (in.weight_format != WeightFormat::none && in.weight_format != WeightFormat::int4_g32_bf16)
        throw InvalidArgument(fmt::format("dequant_gemv: weight format {} is not supported (int4_g32_bf16)",
                                          to_string(in.weight_format)));
    if (in.act_dtype != DType::none && in.act_dtype != DType::bf16)
        throw InvalidArgument("dequant_gemv: activations must be bf16");
    d.m = in.m;
    d.n = in.n;
    d.k = in.k;
    d.weight_format = WeightFormat::int4_g32_bf16;
    d.act_dtype = DType::bf16;
    d.target = in.target;
    const int w = in.config.as<Config>().warps ? in.config.as<Config>().warps : 8;
    if (w < 1 || w > 32) throw InvalidArgument(fmt::format("dequant_gemv: warps={} must be in [1, 32]", w));
    Config c;
    c.warps = static_cast<uint8_t>(d.target.is_host() ? 0 : w);  // host kernels have no warps
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource DequantGemvFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "dequant_gemv_dense.cu";
    s.name_expr = fmt::format("&kiln_dev::dequant_gemv_int4_g32<{}, {}, {}, {}>", d.n, d.k, d.m,
                              d.config.as<Config>().warps);
    s.source = fmt::format(
        "// {}\n"
        "#include \"device/dequant_gemv.cuh\"\n",
        to_string(d));
    return s;
}

HostSource DequantGemvFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "dequant_gemv_dense_host.cpp";
    s.entry = "kiln_dequant_gemv_int4_g32";
    s.scratch_bytes = static_cast<uint64_t>(d.m) * static_cast<uint64_t>(d.k) * sizeof(float);
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/dequant_gemv.hpp\"\n"
        "extern \"C\" void kiln_dequant_gemv_int4_g32(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, kiln_host::dequant_gemv_scratch_bytes({}, {}));\n"
        "    kiln_host::dequant_gemv_int4_g32<{}, {}, {}>(ctx, *static_cast<const kiln_params::DequantGemvParams*>(args));\n"
        "}}\n",
        to_string(d), d.m, d.k, d.n, d.k, d.m);
    return s;
}

KernelDescriptor DequantGemvFamily::descriptor(int m_bucket, int n, int k, Target target, int warps) {
    KernelDescriptor d;
    d.family = ShortName(k_name);
    d.mode = ShortName("dense");
    d.m = m_bucket;
    d.n = n;
    d.k = k;
    d.target = target;
    Config c;
    c.warps = static_cast<uint8_t>(warps);
    d.config = KernelConfig::of(c);
    return DequantGemvFamily().canonicalize(d);
}

static void expect_aligned(const runtime::TensorView& t, const char* what) {
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
        throw InvalidArgument(fmt::format("dequant_gemv {}: data must be 16-byte aligned", what));
}

kiln_params::DequantGemvParams dequant_gemv_params(const LoadedKernel& k, const DequantGemvArgs& a, Location where) {
    const KernelDescriptor& d = k.desc;
    if (d.family.view() != DequantGemvFamily::k_name)
        throw InvalidArgument(fmt::format("launch_dequant_gemv: kernel is {}", k.name));
    runtime::expect_tensor(a.x, "dequant_gemv x", DType::bf16, 2, where);
    runtime::expect_shape(a.x, "dequant_gemv x", {-1, d.k});
    runtime::expect_tensor(a.weight_packed, "dequant_gemv weight_packed", DType::i32, 2, where);
    runtime::expect_shape(a.weight_packed, "dequant_gemv weight_packed", {d.n, d.k / 8});
    runtime::expect_tensor(a.weight_scale, "dequant_gemv weight_scale", DType::bf16, 2, where);
    runtime::expect_shape(a.weight_scale, "dequant_gemv weight_scale", {d.n, d.k / 32});
    const int64_t m = a.x.shape[0];
    if (m < 1 || m > d.m)
        throw InvalidArgument(fmt::format("dequant_gemv: m={} outside the kernel's M-bucket [1, {}]", m, d.m));
    runtime::expect_tensor(a.y, "dequant_gemv y", DType::bf16, 2, where);
    runtime::expect_shape(a.y, "dequant_gemv y", {m, d.n});
    if (where == Location::device) {
        expect_aligned(a.x, "x");
        expect_aligned(a.weight_packed, "weight_packed");
    }

    kiln_params::DequantGemvParams p{};
    p.x = a.x.ptr<const uint16_t>();
    p.weight_packed = a.weight_packed.ptr<const uint32_t>();
    p.weight_scale = a.weight_scale.ptr<const uint16_t>();
    p.y = a.y.ptr<uint16_t>();
    p.m = static_cast<int32_t>(m);
    return p;
}

void launch_dequant_gemv(const LoadedKernel& k, runtime::Stream& stream, const DequantGemvArgs& a) {
    const kiln_params::DequantGemvParams p = dequant_gemv_params(k, a, stream.backend().location());
    const KernelDescriptor& d = k.desc;
    runtime::LaunchDims dims;
    const uint32_t warps = d.config.as<DequantGemvConfig>().warps;
    if (warps > 0) {
        dims.grid = {(static_cast<uint32_t>(d.n) + warps - 1) / warps, 1, 1};
        dims.block = {warps * 32u, 1, 1};
    }
    dims.smem = k.dynamic_smem;
    stream.launch(k.handle, dims, p);
}

std::vector<double> dequant_gemv_reference(const std::vector<uint16_t>& x, int m, const std::vector<int32_t>& packed,
                                           const std::vector<uint16_t>& scale, int n, int k) {
    std::vector<double> y(static_cast<size_t>(m) * n, 0.0);
    for (int row = 0; row < n; ++row) {
        for (int kk = 0; kk < k; ++kk) {
            const uint32_t word = static_cast<uint32_t>(packed[static_cast<size_t>(row) * (k / 8) + kk / 8]);
            const int code = static_cast<int>((word >> (4 * (kk % 8))) & 0xfu);
            const double w = static_cast<double>(code - 8) *
                             runtime::bf16_to_float(scale[static_cast<size_t>(row) * (k / 32) + kk / 32]);
            for (int r = 0; r < m; ++r)
                y[static_cast<size_t>(r) * n + row] += w * runtime::bf16_to_float(x[static_cast<size_t>(r) * k + kk]);
        }
    }
    return y;
}

}  // namespace kiln::jit
