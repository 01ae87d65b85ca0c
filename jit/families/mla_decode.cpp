#include "jit/families/mla_decode.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "jit/families/mla_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(MlaDecodeConfig, heads_per_cta, 0, 32, "query heads per CTA: 8, 16, 24, 32 (device; default 16, 32 with mma)"),
    KILN_CONFIG_FIELD(MlaDecodeConfig, mma, 0, 1, "1: bf16 tensor cores, mma.sync over 64-key tiles (device)"),
};
}  // namespace

std::span<const ConfigField> MlaDecodeFamily::config_fields() const { return k_fields; }

KernelDescriptor MlaDecodeFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = mla::canonical_start(k_name, in, {"paged"});
    mla::take_attention_dims(k_name, in, d);
    Config c;
    if (!d.target.is_host()) {
        const Config want = in.config.as<Config>();
        if (want.mma > 1) throw InvalidArgument(fmt::format("{}: mma={} must be 0 or 1", k_name, want.mma));
        const int bh = want.heads_per_cta ? want.heads_per_cta : (want.mma ? mla::k_mma_rows : 16);
        if (bh % mla::k_attn_warps != 0 || bh > 4 * mla::k_attn_warps)
            throw InvalidArgument(fmt::format("{}: heads_per_cta={} must be 8, 16, 24 or 32", k_name, bh));
        if (want.mma && bh != mla::k_mma_rows)
            throw InvalidArgument(fmt::format("{}: heads_per_cta={} must be {} with mma", k_name, bh, mla::k_mma_rows));
        const uint32_t smem = want.mma ? mla::attention_mma_smem(d.n, d.k) : mla::attention_smem(d.n, d.k, bh);
        if (smem > mla::k_smem_limit)
            throw InvalidArgument(fmt::format("{}: heads_per_cta={}{} needs {} bytes of shared memory for d_c={}, d_r={} "
                                              "(at most {})",
                                              k_name, bh, want.mma ? " with mma" : "", smem, d.n, d.k, mla::k_smem_limit));
        if (want.mma && (d.n + d.k) % 16 != 0)
            throw InvalidArgument(fmt::format("{}: mma needs d_c + d_r = {} to be a multiple of 16", k_name, d.n + d.k));
        c.heads_per_cta = static_cast<uint8_t>(bh);
        c.mma = want.mma;
    }
    d.config = KernelConfig::of(c);
    return d;
}

uint32_t MlaDecodeFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    if (!c.heads_per_cta) return 0;
    return c.mma ? mla::attention_mma_smem(d.n, d.k) : mla::attention_smem(d.n, d.k, c.heads_per_cta);
}

DeviceSource MlaDecodeFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "mla_decode.cu";
    const Config c = d.config.as<Config>();
    s.name_expr = c.mma ? fmt::format("&kiln_dev::mla::mla_decode_mma<{}, {}>", d.n, d.k)
                        : fmt::format("&kiln_dev::mla::mla_decode<{}, {}, {}>", d.n, d.k, c.heads_per_cta);
    s.source = fmt::format("// {}\n#include \"device/{}.cuh\"\n", to_string(d), c.mma ? "mla_attention_mma" : "mla_attention");
    return s;
}

HostSource MlaDecodeFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "mla_decode_host.cpp";
    s.entry = "kiln_mla_decode";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/mla.hpp\"\n"
        "extern \"C\" void kiln_mla_decode(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::mla::attention<{}, {}>(ctx, *static_cast<const kiln_params::mla::AttentionParams*>(args));\n"
        "}}\n",
        to_string(d), d.n, d.k);
    return s;
}

KernelDescriptor MlaDecodeFamily::descriptor(int d_c, int d_r, Target target, int heads_per_cta, bool mma) {
    KernelDescriptor d = mla::base_descriptor(k_name, "paged", target);
    d.n = d_c;
    d.k = d_r;
    Config c;
    c.heads_per_cta = static_cast<uint8_t>(heads_per_cta);
    c.mma = mma ? 1 : 0;
    d.config = KernelConfig::of(c);
    return MlaDecodeFamily().canonicalize(d);
}

void check_mla_attention(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AttentionParams& p,
                         std::string_view what) {
    if (p.heads < 1) throw InvalidArgument(fmt::format("{}: heads={} must be positive", what, p.heads));
    if (p.splits < 1 || p.splits > mla::k_max_pieces)
        throw InvalidArgument(fmt::format("{}: splits={} must be in [1, {}]", what, p.splits, mla::k_max_pieces));
    if (p.split_keys < mla::k_piece_align || p.split_keys % mla::k_piece_align != 0)
        throw InvalidArgument(fmt::format("{}: split_keys={} must be a positive multiple of {}", what, p.split_keys,
                                          mla::k_piece_align));
    if (p.only < 0 || p.only > 2) throw InvalidArgument(fmt::format("{}: only={} must be 0, 1 or 2", what, p.only));
    if (!(p.scale > 0.0f) || !std::isfinite(p.scale))
        throw InvalidArgument(fmt::format("{}: scale {} must be positive and finite", what, p.scale));
    if (!p.q || !p.out || (p.splits > 1 && (!p.part_o || !p.part_lse)))
        throw InvalidArgument(fmt::format("{}: q, out (and with splits > 1 the partial buffers) are required", what));
    const uint64_t row = uint64_t(k.desc.n + k.desc.k) * 2;
    if (p.idx.page_size < 1 || p.layer_offset + row * uint64_t(p.idx.page_size) > p.idx.page_bytes)
        throw InvalidArgument(fmt::format("{}: {} rows of {} bytes at offset {} overflow a page of {} bytes", what,
                                          p.idx.page_size, row, p.layer_offset, p.idx.page_bytes));
    if (stream.backend().kind() == runtime::BackendKind::cuda &&
        (p.layer_offset % 16 != 0 || p.idx.page_bytes % 16 != 0 || (p.idx.arena_base + p.idx.arena_bytes) % 16 != 0))
        throw InvalidArgument(fmt::format("{}: the pages and the layer offset must be 16-byte aligned", what));
}

void launch_mla_decode(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AttentionParams& p) {
    if (k.desc.family.view() != MlaDecodeFamily::k_name)
        throw InvalidArgument(fmt::format("launch_mla_decode: kernel is {}", k.name));
    check_mla_attention(k, stream, p, "launch_mla_decode");
    if (p.idx.num_tokens <= 0) return;
    const int bh = std::max<int>(1, k.desc.config.as<MlaDecodeConfig>().heads_per_cta);
    const int64_t ctas = int64_t(p.idx.num_tokens) * ((p.heads + bh - 1) / bh);
    if (ctas > INT32_MAX) throw InvalidArgument("launch_mla_decode: too many tokens for one launch");
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(ctas), static_cast<uint32_t>(p.splits), 1};
    dims.block = {mla::k_attn_threads, 1, 1};
    dims.smem = k.dynamic_smem;
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
