#include "tests/ops/op_case.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tests/ops/cases.hpp"

namespace kiln::ops {

namespace {

struct FamilyCases {
    const char* family;
    void (*add)(CaseList&);
};

const FamilyCases k_families[] = {
    {"dequant_gemv", add_dequant_gemv_cases},
    {"moe_routing", add_moe_routing_cases},
    {"moe_w4a16_route", add_moe_w4a16_route_cases},
    {"moe_w4a16_decode", add_moe_w4a16_decode_cases},
    {"moe_w4a16_decode_fused", add_moe_w4a16_decode_fused_cases},
    {"moe_w4a16_prefill", add_moe_w4a16_prefill_cases},
    {"moe_w4a16_combine", add_moe_w4a16_combine_cases},
    {"moe_w4a16_dequant", add_moe_w4a16_dequant_cases},
    {"moe_w4a16", add_moe_w4a16_cases},
    {"rmsnorm", add_rmsnorm_cases},
    {"glu", add_glu_cases},
    {"embedding", add_embedding_cases},
    {"attn_res", add_attn_res_cases},
    {"router", add_router_cases},
    {"linear", add_linear_cases},
    {"sample", add_sample_cases},
    {"linear_layer", add_linear_layer_cases},
    {"mla_cache_append", add_mla_cache_append_cases},
    {"mla_absorb", add_mla_absorb_cases},
    {"mla_decode", add_mla_decode_cases},
    {"mla_prefill", add_mla_prefill_cases},
    {"mla_combine", add_mla_combine_cases},
    {"mla", add_mla_layer_cases},
    {"kda_prep", add_kda_prep_cases},
    {"kda_chunk", add_kda_chunk_cases},
    {"kda_decode", add_kda_decode_cases},
    {"kda_out_norm", add_kda_out_norm_cases},
    {"kda", add_kda_cases},
};

}  // namespace

std::vector<std::string> families() {
    std::vector<std::string> out;
    for (const FamilyCases& f : k_families) out.emplace_back(f.family);
    return out;
}

CaseList all_cases(const std::string& filter) {
    CaseList all;
    for (const FamilyCases& f : k_families) f.add(all);
    if (filter.empty()) return all;
    CaseList out;
    for (auto& c : all)
        if (c->name().find(filter) != std::string::npos || c->family() == filter) out.push_back(std::move(c));
    return out;
}

std::vector<std::string> check_case(OpCase& c, test::TestBackend& b) {
    std::vector<std::string> failures;
    c.setup(b);
    for (int rep = 0; rep < 2; ++rep) {
        c.poison(b);
        c.run(b);
        b.stream->synchronize();
        for (std::string& f : c.check(b)) failures.push_back(fmt::format("run {}: {}", rep + 1, f));
    }
    c.teardown(b);
    return failures;
}

PerfResult time_case(OpCase& c, test::TestBackend& b, int iters, int warmup) {
    PerfResult r;
    r.name = c.name();
    r.backend = b.name;
    c.setup(b);
    for (int i = 0; i < warmup; ++i) c.run(b);
    auto start = b.backend->create_event(), end = b.backend->create_event();
    std::vector<double> us;
    for (int i = 0; i < std::max(1, iters); ++i) {
        b.stream->record(*start);
        c.run(b);
        b.stream->record(*end);
        end->synchronize();
        us.push_back(1000.0 * end->elapsed_ms_since(*start));
    }
    b.stream->synchronize();
    c.teardown(b);
    std::sort(us.begin(), us.end());
    r.us = us[us.size() / 2];
    const Cost cost = c.cost();
    r.bytes = cost.bytes;
    r.flops = cost.flops;
    if (b.backend->kind() == runtime::BackendKind::cuda)
        r.floor_us = 1e6 * std::max(cost.bytes / k_hbm_bytes_per_s, cost.flops / k_peak_flops);
    return r;
}

}  // namespace kiln::ops
