#include "jit/families/mla_absorb.hpp"

#include <fmt/format.h>

#include "jit/families/mla_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr int k_threads = 256, k_q_tokens = 32, k_out_tokens = 16, k_out_cols = 64;  // mla_absorb.cuh
bool is_q(const KernelDescriptor& d) { return d.mode.view() == "q"; }
}  // namespace

KernelDescriptor MlaAbsorbFamily::canonicalize(const KernelDescriptor& in) const {
    return mla::canonical_start(k_name, in, {"q", "out"});
}

uint32_t MlaAbsorbFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    return static_cast<uint32_t>((is_q(d) ? k_q_tokens : k_out_tokens) * mla::k_max_latent * 4);
}

DeviceSource MlaAbsorbFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = is_q(d) ? "mla_absorb_q.cu" : "mla_absorb_out.cu";
    s.name_expr = is_q(d) ? "&kiln_dev::mla::mla_absorb_q" : "&kiln_dev::mla::mla_absorb_out";
    s.source = fmt::format("// {}\n#include \"device/mla_absorb.cuh\"\n", to_string(d));
    return s;
}

HostSource MlaAbsorbFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    const char* fn = is_q(d) ? "absorb_q" : "absorb_out";
    s.file_name = fmt::format("mla_{}_host.cpp", fn);
    s.entry = fmt::format("kiln_mla_{}", fn);
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/mla.hpp\"\n"
        "extern \"C\" void {}(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::mla::{}(ctx, *static_cast<const kiln_params::mla::AbsorbParams*>(args));\n"
        "}}\n",
        to_string(d), s.entry, fn);
    return s;
}

KernelDescriptor MlaAbsorbFamily::descriptor(MlaAbsorbMode mode, Target target) {
    return MlaAbsorbFamily().canonicalize(mla::base_descriptor(k_name, mode == MlaAbsorbMode::q ? "q" : "out", target));
}

void launch_mla_absorb(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AbsorbParams& p) {
    if (k.desc.family.view() != MlaAbsorbFamily::k_name)
        throw InvalidArgument(fmt::format("launch_mla_absorb: kernel is {}", k.name));
    const auto in_range = [](int v, int lo) { return v >= lo && v <= mla::k_max_latent; };
    if (!in_range(p.d_n, 1) || !in_range(p.d_v, 1) || !in_range(p.d_c, 2) || p.d_c % 2 != 0 || p.d_r < 0 ||
        p.d_r > mla::k_max_rope || p.heads < 1)
        throw InvalidArgument(fmt::format("launch_mla_absorb: heads={}, d_n={}, d_r={}, d_v={}, d_c={} out of range "
                                          "(dims at most {}, d_c even)",
                                          p.heads, p.d_n, p.d_r, p.d_v, p.d_c, mla::k_max_latent));
    const bool q = is_q(k.desc);
    if (q && (p.x_stride < p.heads * (p.d_n + p.d_r) || p.out_stride < p.heads * (p.d_c + p.d_r)))
        throw InvalidArgument(fmt::format("launch_mla_absorb q: strides {} / {} do not cover {} heads", p.x_stride,
                                          p.out_stride, p.heads));
    if (!q && (p.x_stride < p.heads * p.d_c || p.out_stride < p.heads * p.d_v))
        throw InvalidArgument(fmt::format("launch_mla_absorb out: strides {} / {} do not cover {} heads", p.x_stride,
                                          p.out_stride, p.heads));
    if (!q && p.x_stride % 2 != 0) throw InvalidArgument("launch_mla_absorb out: the latent stride must be even");
    if (p.num_tokens < 0) throw InvalidArgument(fmt::format("launch_mla_absorb: {} tokens", p.num_tokens));
    if (p.num_tokens == 0) return;
    runtime::LaunchDims dims;
    const int64_t tbs = (p.num_tokens + (q ? k_q_tokens : k_out_tokens) - 1) / (q ? k_q_tokens : k_out_tokens);
    const int64_t cols = q ? (p.d_c + k_threads - 1) / k_threads : (p.d_v + k_out_cols - 1) / k_out_cols;
    const int64_t ctas = int64_t(p.heads) * tbs * cols;
    if (ctas > INT32_MAX) throw InvalidArgument("launch_mla_absorb: too many tokens for one launch");
    dims.grid = {static_cast<uint32_t>(ctas), 1, 1};
    dims.block = {k_threads, 1, 1};
    dims.smem = static_cast<uint32_t>((q ? k_q_tokens * p.d_n : k_out_tokens * p.d_c) * 4);
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
