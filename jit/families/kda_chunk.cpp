#include "jit/families/kda_chunk.hpp"

#include <fmt/format.h>

#include "jit/families/kda_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr int k_threads = 256, k_slice = 32, k_chunk = 64;
// templates/device/kda_chunk.cuh: chunk_smem_floats
constexpr uint32_t smem_bytes(int K) {
    return 4u * (4 * k_chunk * (K + 1) + 3 * k_chunk * (k_chunk + 1) + K * k_slice + k_chunk * (k_slice + 1) + k_chunk + K);
}
}  // namespace

KernelDescriptor KdaChunkFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = kda::canonical_start(k_name, in);
    d.config = KernelConfig::of(Config{});
    return d;
}

uint32_t KdaChunkFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    return d.target.is_host() ? 0 : smem_bytes(d.k);
}

DeviceSource KdaChunkFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "kda_chunk.cu";
    s.name_expr = fmt::format("&kiln_dev::kda::kda_chunk<{}>", d.k);
    s.source = fmt::format("// {}\n#include \"device/kda_chunk.cuh\"\n", to_string(d));
    return s;
}

HostSource KdaChunkFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "kda_chunk_host.cpp";
    s.entry = "kiln_kda_chunk";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/kda.hpp\"\n"
        "extern \"C\" void kiln_kda_chunk(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::kda::chunk<{}>(ctx, *static_cast<const kiln_params::KdaChunkParams*>(args));\n"
        "}}\n",
        to_string(d), d.k);
    return s;
}

KernelDescriptor KdaChunkFamily::descriptor(int head_dim, Target target) {
    return KdaChunkFamily().canonicalize(kda::base_descriptor(k_name, head_dim, target));
}

void launch_kda_chunk(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::KdaChunkParams& p) {
    if (k.desc.family.view() != KdaChunkFamily::k_name)
        throw InvalidArgument(fmt::format("launch_kda_chunk: kernel is {}", k.name));
    if (p.heads < 1 || p.idx.num_seqs < 1)
        throw InvalidArgument(fmt::format("launch_kda_chunk: {} heads, {} sequences", p.heads, p.idx.num_seqs));
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(p.idx.num_seqs) * static_cast<uint32_t>(p.heads) *
                     static_cast<uint32_t>(k.desc.k / k_slice),
                 1, 1};
    dims.block = {k_threads, 1, 1};
    dims.smem = k.dynamic_smem;
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
