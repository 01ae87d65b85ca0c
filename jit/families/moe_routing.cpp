#include "jit/families/moe_routing.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/moe_routing_params.h"
#include "runtime/error.hpp"

namespace kiln::jit {

using runtime::DType;
using runtime::Location;

static constexpr ConfigField k_fields[] = {
    KILN_CONFIG_FIELD(MoeRoutingConfig, block_m, 0, 1024, "rows each expert is padded to (0: 64)"),
    KILN_CONFIG_FIELD(MoeRoutingConfig, warps, 0, 32, "warps of the CTA (device; default from the experts)"),
};

std::span<const ConfigField> MoeRoutingFamily::config_fields() const { return k_fields; }

static int default_warps(int experts) {
    if (experts <= 512) return 32;
    if (experts <= 1024) return 16;
    if (experts <= 2048) return 8;
    return 4;
}

KernelDescriptor MoeRoutingFamily::canonicalize(const KernelDescriptor& in) const {
    KernelDescriptor d;
    d.family = ShortName(k_name);
    if (in.mode.empty()) d.mode = ShortName("indexed");
    else if (in.mode.view() != "indexed")
        throw InvalidArgument(fmt::format("moe_routing: unknown mode '{}' (modes: indexed)", in.mode.view()));
    else d.mode = in.mode;
    if (in.experts < 1 || in.experts > k_max_experts)
        throw InvalidArgument(fmt::format("moe_routing: experts={} must be in [1, {}]", in.experts, k_max_experts));
    if (in.topk < 1 || in.topk > std::min(in.experts, 64))
        throw InvalidArgument(fmt::format("moe_routing: topk={} must be in [1, min(experts, 64)]", in.topk));
    if (in.weight_format != WeightFormat::none)
        throw InvalidArgument("moe_routing: takes no quantised weights (weight format must be none)");
    d.experts = in.experts;
    d.topk = in.topk;
    d.act_dtype = DType::i32;
    d.target = in.target;
    const Config c = in.config.as<Config>();
    Config out;
    const int bm = c.block_m ? c.block_m : 64;
    if (bm < 1 || bm > 1024) throw InvalidArgument(fmt::format("moe_routing: block_m={} must be in [1, 1024]", bm));
    const int w = c.warps ? c.warps : default_warps(in.experts);
    if (w < 1 || w > 32) throw InvalidArgument(fmt::format("moe_routing: warps={} must be in [1, 32]", w));
    out.block_m = static_cast<uint16_t>(bm);
    out.warps = static_cast<uint8_t>(d.target.is_host() ? 0 : w);  // host kernels have no warps
    d.config = KernelConfig::of(out);
    return d;
}

uint32_t MoeRoutingFamily::max_dynamic_smem(const KernelDescriptor& d) const {
    const uint32_t e = static_cast<uint32_t>(d.experts), w = d.config.as<Config>().warps;
    return (w * e + 2 * e + w + 1) * 4;  // per-warp counts, count, offset, the scan's scratch
}

DeviceSource MoeRoutingFamily::device_source(const KernelDescriptor& d) const {
    DeviceSource s;
    s.file_name = "moe_routing_indexed.cu";
    const Config c = d.config.as<Config>();
    s.name_expr = fmt::format("&kiln_dev::moe_routing_indexed<{}, {}, {}, {}>", d.experts, d.topk, c.block_m, c.warps);
    s.source = fmt::format(
        "// {}\n"
        "#include \"device/moe_routing.cuh\"\n",
        to_string(d));
    return s;
}

HostSource MoeRoutingFamily::host_source(const KernelDescriptor& d) const {
    HostSource s;
    s.file_name = "moe_routing_indexed_host.cpp";
    s.entry = "kiln_moe_routing_indexed";
    s.source = fmt::format(
        "// {}\n"
        "#include \"host/moe_routing.hpp\"\n"
        "extern \"C\" void kiln_moe_routing_indexed(const kiln_host_ctx* ctx, const void* args) {{\n"
        "    KILN_HOST_ENTRY_GUARD(ctx, 0);\n"
        "    kiln_host::moe_routing_indexed<{}, {}, {}>(ctx, *static_cast<const kiln_params::MoeRoutingParams*>(args));\n"
        "}}\n",
        to_string(d), d.experts, d.topk, d.config.as<Config>().block_m);
    return s;
}

KernelDescriptor MoeRoutingFamily::descriptor(int experts, int topk, Target target, int block_m, int warps) {
    KernelDescriptor d;
    d.family = ShortName(k_name);
    d.mode = ShortName("indexed");
    d.experts = experts;
    d.topk = topk;
    d.target = target;
    Config c;
    c.block_m = static_cast<uint16_t>(block_m);
    c.warps = static_cast<uint8_t>(warps);
    d.config = KernelConfig::of(c);
    return MoeRoutingFamily().canonicalize(d);
}

int64_t moe_routing_capacity(int64_t tokens, int topk, int experts, int block_m) {
    const int64_t n = tokens * topk;
    const int64_t rows = n + std::min<int64_t>(experts, n) * (block_m - 1);
    return (rows + block_m - 1) / block_m * block_m;
}

kiln_params::MoeRoutingParams moe_routing_params(const LoadedKernel& k, const MoeRoutingArgs& a, Location where) {
    const KernelDescriptor& d = k.desc;
    if (d.family.view() != MoeRoutingFamily::k_name)
        throw InvalidArgument(fmt::format("launch_moe_routing: kernel is {}", k.name));
    runtime::expect_tensor(a.topk_ids, "moe_routing topk_ids", DType::i32, 2, where);
    runtime::expect_shape(a.topk_ids, "moe_routing topk_ids", {-1, d.topk});
    runtime::expect_tensor(a.sorted_ids, "moe_routing sorted_ids", DType::i32, 1, where);
    runtime::expect_tensor(a.block_expert, "moe_routing block_expert", DType::i32, 1, where);
    runtime::expect_tensor(a.tokens_per_expert, "moe_routing tokens_per_expert", DType::i32, 1, where);
    runtime::expect_shape(a.tokens_per_expert, "moe_routing tokens_per_expert", {d.experts});
    runtime::expect_tensor(a.total_padded, "moe_routing total_padded", DType::i32, 1, where);
    runtime::expect_shape(a.total_padded, "moe_routing total_padded", {1});
    const int64_t tokens = a.topk_ids.shape[0];
    const MoeRoutingConfig c = d.config.as<MoeRoutingConfig>();
    const int bm = c.block_m;
    const int64_t need = moe_routing_capacity(tokens, d.topk, d.experts, bm);
    if (a.sorted_ids.shape[0] < need || a.block_expert.shape[0] < need / bm)
        throw InvalidArgument(fmt::format(
            "moe_routing: {} tokens need sorted_ids of >= {} rows and block_expert of >= {} blocks (got {} and {})",
            tokens, need, need / bm, a.sorted_ids.shape[0], a.block_expert.shape[0]));
    if (tokens * d.topk + static_cast<int64_t>(d.experts) * bm > INT32_MAX)
        throw InvalidArgument(fmt::format("moe_routing: {} tokens overflow 32-bit row indices", tokens));

    kiln_params::MoeRoutingParams p{};
    p.topk_ids = a.topk_ids.ptr<const int32_t>();
    p.sorted_ids = a.sorted_ids.ptr<int32_t>();
    p.block_expert = a.block_expert.ptr<int32_t>();
    p.tokens_per_expert = a.tokens_per_expert.ptr<int32_t>();
    p.total_padded = a.total_padded.ptr<int32_t>();
    p.num_tokens = static_cast<int32_t>(tokens);
    p.sorted_capacity = static_cast<int32_t>(std::min<int64_t>(a.sorted_ids.shape[0], INT32_MAX));
    p.max_blocks = static_cast<int32_t>(std::min<int64_t>(a.block_expert.shape[0], INT32_MAX));
    return p;
}

void launch_moe_routing(const LoadedKernel& k, runtime::Stream& stream, const MoeRoutingArgs& a) {
    const kiln_params::MoeRoutingParams p = moe_routing_params(k, a, stream.backend().location());
    runtime::LaunchDims dims;
    dims.block = {static_cast<uint32_t>(k.desc.config.as<MoeRoutingConfig>().warps) * 32u, 1, 1};
    dims.smem = k.dynamic_smem;
    stream.launch(k.handle, dims, p);
}

MoeRoutingResult moe_routing_reference(const std::vector<int32_t>& topk_ids, int64_t tokens, int topk, int experts,
                                       int block_m, int64_t capacity, int64_t max_blocks) {
    const int64_t n = tokens * topk;
    MoeRoutingResult r;
    r.tokens_per_expert.assign(experts, 0);
    for (int64_t i = 0; i < n; ++i)
        if (topk_ids[i] >= 0 && topk_ids[i] < experts) ++r.tokens_per_expert[topk_ids[i]];
    std::vector<int64_t> first(experts);
    int64_t row = 0;
    for (int e = 0; e < experts; ++e) {
        first[e] = row;
        row += (r.tokens_per_expert[e] + block_m - 1) / block_m * block_m;
    }
    r.total_padded = static_cast<int32_t>(row);
    r.sorted_ids.assign(capacity, static_cast<int32_t>(n));
    r.block_expert.assign(max_blocks, -1);
    std::vector<int64_t> cursor = first;
    for (int64_t i = 0; i < n; ++i) {
        int32_t e = topk_ids[i];
        if (e >= 0 && e < experts) r.sorted_ids[cursor[e]++] = static_cast<int32_t>(i);
    }
    for (int e = 0; e < experts; ++e) {
        int64_t padded = (r.tokens_per_expert[e] + block_m - 1) / block_m * block_m;
        for (int64_t b = first[e] / block_m; b < (first[e] + padded) / block_m; ++b) r.block_expert[b] = e;
    }
    return r;
}

}  // namespace kiln::jit
