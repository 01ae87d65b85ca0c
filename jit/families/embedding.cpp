#include "jit/families/embedding.hpp"

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"gather"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(EmbeddingConfig, threads, 0, 1024, "device CTA threads, one CTA per token (default 128)"),
};
}  // namespace

std::span<const ConfigField> EmbeddingFamily::config_fields() const { return k_fields; }

KernelDescriptor EmbeddingFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    dense::require_bf16(k_name, in);
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    Config c;
    c.threads = dense::threads(k_name, in.config.as<Config>().threads, 128, in.target);
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource EmbeddingFamily::device_source(const KernelDescriptor& d) const {
    return dense::device_entry(d, "device/embedding.cuh",
                               fmt::format("&kiln_dev::embedding<{}>", d.config.as<Config>().threads));
}

HostSource EmbeddingFamily::host_source(const KernelDescriptor& d) const {
    return dense::host_entry(d, "host/embedding.hpp", "kiln_embedding_gather", "EmbeddingParams", "kiln_host::embedding");
}

KernelDescriptor EmbeddingFamily::descriptor(Target target, int threads) {
    KernelDescriptor d = dense::base(k_name, 0, k_modes, target);
    Config c;
    c.threads = static_cast<uint16_t>(threads);
    d.config = KernelConfig::of(c);
    return EmbeddingFamily().canonicalize(d);
}

kiln_params::EmbeddingParams embedding_params(const LoadedKernel& k, const EmbeddingArgs& a, Location where) {
    dense::expect_family(k, EmbeddingFamily::k_name);
    runtime::expect_tensor(a.ids, "embedding ids", DType::i32, 1, where);
    runtime::expect_tensor(a.table, "embedding table", DType::bf16, 2, where);
    const int64_t T = a.ids.shape[0], V = a.table.shape[0], dim = a.table.shape[1];
    runtime::expect_tensor(a.out, "embedding out", DType::bf16, 2, where);
    runtime::expect_shape(a.out, "embedding out", {T, dim});
    if (dim % 8 != 0 || (reinterpret_cast<uintptr_t>(a.table.data) | reinterpret_cast<uintptr_t>(a.out.data)) % 16 != 0)
        throw InvalidArgument(fmt::format("embedding: rows of {} values must be a multiple of 8, table and out 16-byte "
                                          "aligned", dim));
    if (T > INT32_MAX || V > INT32_MAX || dim > INT32_MAX || a.vocab_start < 0 || a.vocab_start > INT32_MAX)
        throw InvalidArgument("embedding: sizes overflow 32-bit ids");
    kiln_params::EmbeddingParams p{};
    if (a.feed.data) {
        runtime::expect_tensor(a.feed, "embedding feed", DType::i32, 2, where);
        runtime::expect_shape(a.feed, "embedding feed", {-1, 2});
        runtime::expect_tensor(a.prev_tokens, "embedding prev_tokens", DType::i32, 1, where);
        if (reinterpret_cast<uintptr_t>(a.feed.data) % 8 != 0) throw InvalidArgument("embedding: feed must be 8-byte aligned");
        p.feed = reinterpret_cast<const kiln_params::i32x2*>(a.feed.data);
        p.feed_count = static_cast<int32_t>(a.feed.shape[0]);
        p.prev_tokens = a.prev_tokens.ptr<const int32_t>();
        p.prev_count = static_cast<int32_t>(a.prev_tokens.shape[0]);
    }
    if (a.ids_out.data) {
        runtime::expect_tensor(a.ids_out, "embedding ids_out", DType::i32, 1, where);
        runtime::expect_shape(a.ids_out, "embedding ids_out", {T});
        p.ids_out = a.ids_out.ptr<int32_t>();
    }
    p.ids = a.ids.ptr<const int32_t>();
    p.table = a.table.ptr<const kiln_params::bf16>();
    p.out = a.out.ptr<kiln_params::bf16>();
    p.tokens = static_cast<int32_t>(T);
    p.dim = static_cast<int32_t>(dim);
    p.vocab = static_cast<int32_t>(V);
    p.vocab_start = static_cast<int32_t>(a.vocab_start);
    return p;
}

void launch_embedding(const LoadedKernel& k, runtime::Stream& stream, const EmbeddingArgs& a) {
    const kiln_params::EmbeddingParams p = embedding_params(k, a, stream.backend().location());
    if (p.tokens == 0) return;
    const uint32_t t = k.desc.config.as<EmbeddingConfig>().threads;
    runtime::LaunchDims dims;
    dims.block = {t ? t : 1, 1, 1};
    dims.grid = {static_cast<uint32_t>(p.tokens), 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
