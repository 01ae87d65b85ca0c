#include "jit/families/sample.hpp"

#include <fmt/format.h>

#include "jit/families/dense_common.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

namespace {
constexpr std::string_view k_modes[] = {"sample"};
constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(SampleConfig, threads, 0, 1024, "device CTA threads, one CTA per sequence (default 512)"),
};
}  // namespace

std::span<const ConfigField> SampleFamily::config_fields() const { return k_fields; }

KernelDescriptor SampleFamily::canonicalize(const KernelDescriptor& in) const {
    const int mode = dense::mode_index(k_name, in, k_modes);
    if (in.weight_format != WeightFormat::none) throw InvalidArgument("sample: takes no quantised weights");
    if (in.act_dtype != DType::none && in.act_dtype != DType::f32) throw InvalidArgument("sample: logits must be f32");
    KernelDescriptor d = dense::base(k_name, mode, k_modes, in.target);
    d.act_dtype = DType::f32;
    Config c;
    c.threads = dense::threads(k_name, in.config.as<Config>().threads, 512, in.target);
    d.config = KernelConfig::of(c);
    return d;
}

DeviceSource SampleFamily::device_source(const KernelDescriptor& d) const {
    return dense::device_entry(d, "device/sample.cuh", fmt::format("&kiln_dev::sample<{}>", d.config.as<Config>().threads));
}

HostSource SampleFamily::host_source(const KernelDescriptor& d) const {
    return dense::host_entry(d, "host/sample.hpp", "kiln_sample", "SampleParams", "kiln_host::sample");
}

KernelDescriptor SampleFamily::descriptor(Target target, int threads) {
    KernelDescriptor d = dense::base(k_name, 0, k_modes, target);
    d.act_dtype = DType::f32;
    Config c;
    c.threads = static_cast<uint16_t>(threads);
    d.config = KernelConfig::of(c);
    return SampleFamily().canonicalize(d);
}

kiln_params::SampleParams sample_params(const LoadedKernel& k, const SampleArgs& a, Location where) {
    dense::expect_family(k, SampleFamily::k_name);
    runtime::expect_tensor(a.logits, "sample logits", DType::f32, 2, where);
    const int64_t S = a.logits.shape[0], V = a.vocab;
    if (V < 1 || V > a.logits.shape[1] || a.logits.strides[1] != 1 || V > INT32_MAX)
        throw InvalidArgument(fmt::format("sample: vocab {} does not fit logits {}", V, a.logits.describe()));
    runtime::expect_tensor(a.seqs, "sample seqs", DType::u8, 2, where);
    runtime::expect_shape(a.seqs, "sample seqs", {S, int64_t(sizeof(kiln_params::SampleSeq))});
    runtime::expect_tensor(a.out, "sample out", DType::u8, 2, where);
    runtime::expect_shape(a.out, "sample out", {S, int64_t(sizeof(kiln_params::SampleOut))});
    runtime::expect_tensor(a.tokens_out, "sample tokens_out", DType::i32, 1, where);
    runtime::expect_shape(a.tokens_out, "sample tokens_out", {S});
    if ((reinterpret_cast<uintptr_t>(a.seqs.data) | reinterpret_cast<uintptr_t>(a.out.data)) % 8 != 0)
        throw InvalidArgument("sample: seqs and out must be 8-byte aligned");
    kiln_params::SampleParams p{};
    if (a.penalty_tokens.data) {
        runtime::expect_tensor(a.penalty_tokens, "sample penalty_tokens", DType::i32, 1, where);
        p.penalty_tokens = a.penalty_tokens.ptr<const int32_t>();
    }
    if (a.prev_tokens.data) {
        runtime::expect_tensor(a.prev_tokens, "sample prev_tokens", DType::i32, 1, where);
        p.prev_tokens = a.prev_tokens.ptr<const int32_t>();
        p.prev_count = static_cast<int32_t>(a.prev_tokens.shape[0]);
    }
    if (a.counts.data) {
        runtime::expect_tensor(a.counts, "sample counts", DType::u32, 2, where);
        runtime::expect_shape(a.counts, "sample counts", {S, V});
        p.counts = a.counts.ptr<uint32_t>();
    }
    if (S > INT32_MAX) throw InvalidArgument("sample: too many sequences");
    p.logits = a.logits.ptr<const float>();
    p.logits_stride = a.logits.strides[0];
    p.seqs = static_cast<const kiln_params::SampleSeq*>(a.seqs.data);
    p.num_seqs = static_cast<int32_t>(S);
    p.out = static_cast<kiln_params::SampleOut*>(a.out.data);
    p.tokens_out = a.tokens_out.ptr<int32_t>();
    p.vocab = static_cast<int32_t>(V);
    return p;
}

void launch_sample(const LoadedKernel& k, runtime::Stream& stream, const SampleArgs& a) {
    const kiln_params::SampleParams p = sample_params(k, a, stream.backend().location());
    if (p.num_seqs == 0) return;
    const uint32_t t = k.desc.config.as<SampleConfig>().threads;
    runtime::LaunchDims dims;
    dims.block = {t ? t : 1, 1, 1};
    dims.grid = {static_cast<uint32_t>(p.num_seqs), 1, 1};
    stream.launch(k.handle, dims, p);
}

}  // namespace kiln::jit
