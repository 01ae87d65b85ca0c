#include "jit/families/mla_cache_append.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/mla_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

KernelDescriptor MlaCacheAppendFamily::canonicalize(const KernelDescriptor& in) const {
    return mla::canonical_start(k_name, in, {"paged"});
}

DeviceSource MlaCacheAppendFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "mla_cache_append.cu";
    s.name_expr = "&kiln_dev::mla::mla_cache_append";
    s.source = fmt::format("// {}\n#include \"device/mla_cache_append.cuh\"\n", to_string(d));
    return s;
}

HostSource MlaCacheAppendFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "mla_cache_append_host.cpp";
    s.entry = "kiln_mla_cache_append";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/mla.hpp\"\n"
        "extern \"C\" void kiln_mla_cache_append(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::mla::cache_append(ctx, *static_cast<const kiln_params::mla::CacheAppendParams*>(args));\n"
        "}}\n",
        to_string(d));
    return s;
}

KernelDescriptor MlaCacheAppendFamily::descriptor(Target target) {
    return MlaCacheAppendFamily().canonicalize(mla::base_descriptor(k_name, "paged", target));
}

void launch_mla_cache_append(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::CacheAppendParams& p) {
    if (k.desc.family.view() != MlaCacheAppendFamily::k_name)
        throw InvalidArgument(fmt::format("launch_mla_cache_append: kernel is {}", k.name));
    if (p.d_c < 8 || p.d_c % 8 != 0 || p.d_r < 8 || p.d_r % 8 != 0)
        throw InvalidArgument(fmt::format("launch_mla_cache_append: d_c={} and d_r={} must be positive multiples of 8",
                                          p.d_c, p.d_r));
    if (p.latent_stride < p.d_c || p.rope_stride < p.d_r || p.latent_stride % 8 != 0 || p.rope_stride % 8 != 0)
        throw InvalidArgument(fmt::format("launch_mla_cache_append: strides {} / {} must be multiples of 8 covering "
                                          "d_c={} / d_r={}",
                                          p.latent_stride, p.rope_stride, p.d_c, p.d_r));
    const uint64_t row = uint64_t(p.d_c + p.d_r) * 2;
    if (p.idx.page_size < 1 || p.layer_offset + row * uint64_t(p.idx.page_size) > p.idx.page_bytes)
        throw InvalidArgument(fmt::format("launch_mla_cache_append: {} rows of {} bytes at offset {} overflow a page "
                                          "of {} bytes",
                                          p.idx.page_size, row, p.layer_offset, p.idx.page_bytes));
    const auto misaligned = [](uint64_t v) { return v % 16 != 0; };
    if (misaligned(reinterpret_cast<uint64_t>(p.latent)) || misaligned(reinterpret_cast<uint64_t>(p.k_rope)) ||
        misaligned(p.layer_offset) || misaligned(p.idx.page_bytes) || misaligned(p.idx.arena_base + p.idx.arena_bytes))
        throw InvalidArgument("launch_mla_cache_append: rows, the layer offset and the pages must be 16-byte aligned");
    if (p.idx.num_tokens <= 0) return;
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(std::min(p.idx.num_tokens, 16 * std::max(1, stream.backend().compute_units()))), 1, 1};
    dims.block = {128, 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
