#include "jit/families/mla_prefill.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "jit/families/mla_common.hpp"
#include "jit/families/mla_decode.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

namespace {
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(MlaPrefillConfig, tokens_per_cta, 0, 4, "a sequence's new tokens per CTA: 1, 2, 4 (device; default 4)"),
    KILN_CONFIG_FIELD(MlaPrefillConfig, heads_per_cta, 0, 32, "query heads per CTA; tokens x heads in 8, 16, 24, 32 (device; default 8)"),
    KILN_CONFIG_FIELD(MlaPrefillConfig, mma, 0, 1, "1: bf16 tensor cores, mma.sync over 64-key tiles, 32 rows (device)"),
};
}  // namespace

std::span<const ConfigField> MlaPrefillFamily::config_fields() const { return k_fields; }

KernelDescriptor MlaPrefillFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d = mla::canonical_start(k_name, in, {"paged"});
    mla::take_attention_dims(k_name, in, d);
    Config c;
    if (!d.target.is_host()) {
        const Config want = in.config.as<Config>();
        if (want.mma > 1) throw InvalidArgument(fmt::format("{}: mma={} must be 0 or 1", k_name, want.mma));
        const int bt = want.tokens_per_cta ? want.tokens_per_cta : 4;
        const int bh = want.heads_per_cta ? want.heads_per_cta : (want.mma ? mla::k_mma_rows / bt : 8);
        if (bt != 1 && bt != 2 && bt != 4)
            throw InvalidArgument(fmt::format("{}: tokens_per_cta={} must be 1, 2 or 4", k_name, bt));
        const int rows = bt * bh;
        if (bh < 1 || rows % mla::k_attn_warps != 0 || rows > 4 * mla::k_attn_warps)
            throw InvalidArgument(fmt::format("{}: tokens_per_cta x heads_per_cta = {} x {} must be 8, 16, 24 or 32",
                                              k_name, bt, bh));
        if (want.mma && rows != mla::k_mma_rows)
            throw InvalidArgument(fmt::format("{}: tokens_per_cta x heads_per_cta = {} x {} must be {} rows with mma",
                                              k_name, bt, bh, mla::k_mma_rows));
        if (want.mma && (d.n + d.k) % 16 != 0)
            throw InvalidArgument(fmt::format("{}: mma needs d_c + d_r = {} to be a multiple of 16", k_name, d.n + d.k));
        if (want.mma && mla::attention_mma_smem(d.n, d.k) > mla::k_smem_limit)
            throw InvalidArgument(fmt::format("{}: mma needs {} bytes of shared memory for d_c={}, d_r={} (at most {})",
                                              k_name, mla::attention_mma_smem(d.n, d.k), d.n, d.k, mla::k_smem_limit));
        if (!want.mma && mla::attention_smem(d.n, d.k, rows) > mla::k_smem_limit)
            throw InvalidArgument(fmt::format("{}: {} query rows per CTA need {} bytes of shared memory for d_c={}, "
                                              "d_r={} (at most {}): fewer heads_per_cta",
                                              k_name, rows, mla::attention_smem(d.n, d.k, rows), d.n, d.k,
                                              mla::k_smem_limit));
        c.tokens_per_cta = static_cast<uint8_t>(bt);
        c.heads_per_cta = static_cast<uint8_t>(bh);
        c.mma = want.mma;
    }
    d.config = KernelConfig::of(c);
    return d;
}

uint32_t MlaPrefillFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    if (!c.heads_per_cta) return 0;
    return c.mma ? mla::attention_mma_smem(d.n, d.k) : mla::attention_smem(d.n, d.k, c.tokens_per_cta * c.heads_per_cta);
}

DeviceSource MlaPrefillFamily::device_source(const KernelDescriptor& d) const {
    const Config c = d.config.as<Config>();
    DeviceSource s;
    s.file_name = "mla_prefill.cu";
    s.name_expr = c.mma ? fmt::format("&kiln_dev::mla::mla_prefill_mma<{}, {}, {}>", d.n, d.k, c.tokens_per_cta)
                        : fmt::format("&kiln_dev::mla::mla_prefill<{}, {}, {}, {}>", d.n, d.k, c.tokens_per_cta,
                                      c.heads_per_cta);
    s.source = fmt::format("// {}\n#include \"device/{}.cuh\"\n", to_string(d), c.mma ? "mla_attention_mma" : "mla_attention");
    return s;
}

HostSource MlaPrefillFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "mla_prefill_host.cpp";
    s.entry = "kiln_mla_prefill";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/mla.hpp\"\n"
        "extern \"C\" void kiln_mla_prefill(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::mla::attention<{}, {}>(ctx, *static_cast<const kiln_params::mla::AttentionParams*>(args));\n"
        "}}\n",
        to_string(d), d.n, d.k);
    return s;
}

KernelDescriptor MlaPrefillFamily::descriptor(int d_c, int d_r, Target target, int tokens_per_cta, int heads_per_cta,
                                              bool mma) {
    KernelDescriptor d = mla::base_descriptor(k_name, "paged", target);
    d.n = d_c;
    d.k = d_r;
    Config c;
    c.tokens_per_cta = static_cast<uint8_t>(tokens_per_cta);
    c.heads_per_cta = static_cast<uint8_t>(heads_per_cta);
    c.mma = mma ? 1 : 0;
    d.config = KernelConfig::of(c);
    return MlaPrefillFamily().canonicalize(d);
}

void launch_mla_prefill(const LoadedKernel& k, runtime::Stream& stream, const kiln_params::mla::AttentionParams& p) {
    if (k.desc.family.view() != MlaPrefillFamily::k_name)
        throw InvalidArgument(fmt::format("launch_mla_prefill: kernel is {}", k.name));
    check_mla_attention(k, stream, p, "launch_mla_prefill");
    if (p.idx.num_tokens <= 0 || p.idx.num_seqs <= 0) return;
    const MlaPrefillConfig c = k.desc.config.as<MlaPrefillConfig>();
    const int bt = std::max<int>(1, c.tokens_per_cta), bh = std::max<int>(1, c.heads_per_cta);
    const int64_t ctas = int64_t(p.idx.num_seqs) * ((p.idx.max_new_tokens + bt - 1) / bt) * ((p.heads + bh - 1) / bh);
    if (ctas > INT32_MAX) throw InvalidArgument("launch_mla_prefill: too many tokens for one launch");
    runtime::LaunchDims dims;
    dims.grid = {static_cast<uint32_t>(ctas), static_cast<uint32_t>(p.splits), 1};
    dims.block = {mla::k_attn_threads, 1, 1};
    dims.smem = k.dynamic_smem;
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
