#include "jit/families/glu.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"silu", "situ", "sigmoid_gate"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(GluConfig, threads, 0, 1024, "device CTA threads (default 256)"),
};

// A bf16 matrix whose rows may be strided (unit column stride).
void expect_rows(const runtime::TensorView& t, std::string_view what, Location where) {
    if (t.dtype != DType::bf16 || t.rank != 2 || t.location != where || t.strides[1] != 1 || t.strides[0] < t.shape[1])
        throw InvalidArgument(fmt::format("{}: expected a bf16 matrix with unit column stride on the {}, got {}", what,
                                          where == Location::host ? "host" : "device", t.describe()));
}
}  // namespace

std::span<const ConfigField> GluFamily::config_fields() const { return k_fields; }

KernelDescriptor GluFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    dense::require_bf16(k_name, in);
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    Config c;
    c.threads = dense::threads(k_name, in.config.as<Config>().threads, 256, in.target);
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource GluFamily::device_source(const KernelDescriptor& d) const {
    const int mode = dense::mode_index(k_name, d, k_modes);
    return dense::device_entry(d, "device/glu.cuh",
                               fmt::format("&kiln_dev::glu<{}, {}>", mode, d.config.as<Config>().threads));
}

HostSource GluFamily::host_source(const KernelDescriptor& d) const {
    const int mode = dense::mode_index(k_name, d, k_modes);
    return dense::host_entry(d, "host/glu.hpp", fmt::format("kiln_glu_{}", k_modes[mode]), "GluParams",
                             fmt::format("kiln_host::glu<{}>", mode));
}

KernelDescriptor GluFamily::descriptor(GluMode mode, Target target, int threads) {
    KernelDescriptor d = dense::base(k_name, static_cast<int>(mode), k_modes, target);
    Config c;
    c.threads = static_cast<uint16_t>(threads);
    d.config = KernelConfig::of(c);
    return GluFamily().canonicalize(d);
}

kiln_params::GluParams glu_params(const LoadedKernel& k, const GluArgs& a, Location where) {
    dense::expect_family(k, GluFamily::k_name);
    const auto mode = static_cast<GluMode>(dense::mode_index(GluFamily::k_name, k.desc, k_modes));
    runtime::expect_tensor(a.out, "glu out", DType::bf16, 2, where);
    const int64_t rows = a.out.shape[0], cols = a.out.shape[1];
    expect_rows(a.in, "glu in", where);
    kiln_params::GluParams p{};
    if (mode == GluMode::sigmoid_gate) {
        if (a.in.shape[0] != rows || a.in.shape[1] != cols)
            throw InvalidArgument(fmt::format("glu sigmoid_gate: o is {}, out is {}", a.in.describe(), a.out.describe()));
        expect_rows(a.gate, "glu gate", where);
        if (a.gate.shape[0] != rows || a.gate.shape[1] != cols)
            throw InvalidArgument(fmt::format("glu sigmoid_gate: g is {}, out is {}", a.gate.describe(), a.out.describe()));
        p.gate = a.gate.ptr<const kiln_params::bf16>();
        p.gate_stride = static_cast<int32_t>(a.gate.strides[0]);
    } else {
        if (a.in.shape[0] != rows || a.in.shape[1] != 2 * cols)
            throw InvalidArgument(fmt::format("glu {}: [gate | up] is {}, expected [{}, {}]", k_modes[int(mode)],
                                              a.in.describe(), rows, 2 * cols));
        if (mode == GluMode::situ && !(a.beta > 0.0f))
            throw InvalidArgument(fmt::format("glu situ: beta={} must be positive", a.beta));
    }
    if (cols > INT32_MAX / 2 || a.in.strides[0] > INT32_MAX || a.gate.strides[0] > INT32_MAX)
        throw InvalidArgument("glu: rows too wide");
    p.in = a.in.ptr<const kiln_params::bf16>();
    p.out = a.out.ptr<kiln_params::bf16>();
    p.rows = rows;
    p.cols = static_cast<int32_t>(cols);
    p.in_stride = static_cast<int32_t>(a.in.strides[0]);
    p.beta = a.beta;
    p.linear_beta = a.linear_beta;
    return p;
}

void launch_glu(const LoadedKernel& k, runtime::Stream& stream, const GluArgs& a) {
    const kiln_params::GluParams p = glu_params(k, a, stream.backend().location());
    const int64_t total = p.rows * p.cols;
    if (total == 0) return;
    const uint32_t t = k.desc.config.as<GluConfig>().threads;
    runtime::LaunchDims dims;
    dims.block = {t ? t : 1, 1, 1};
    const int64_t ctas = t ? (total + t - 1) / t : 1;
    dims.grid = {static_cast<uint32_t>(std::min<int64_t>(ctas, int64_t(stream.backend().compute_units()) * 16)), 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
