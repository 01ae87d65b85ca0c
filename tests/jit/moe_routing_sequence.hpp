// The Stream interface's common sequence (tests/common/stream_sequence.hpp) with a real kernel: moe_routing,
// loaded for either target, routing random top-k ids (some of other ranks) into one output buffer laid out as
// [sorted_ids | block_expert | tokens_per_expert | total_padded], expected as moe_routing_reference says.
#pragma once

#include <random>

#include "jit/families/moe_routing.hpp"
#include "tests/common/stream_sequence.hpp"

namespace kiln::test {

inline SequenceKernel moe_routing_sequence(const jit::LoadedKernel& k, int tokens, uint64_t seed) {
    using namespace kiln::jit;
    const int experts = k.desc.experts, topk = k.desc.topk, bm = k.desc.config.as<MoeRoutingConfig>().block_m;
    std::mt19937_64 rng(seed);
    std::vector<int32_t> ids(size_t(tokens) * topk);
    for (auto& id : ids) id = rng() % 9 == 0 ? -1 : static_cast<int32_t>(rng() % experts);
    const int64_t cap = moe_routing_capacity(tokens, topk, experts, bm) + bm, blocks = cap / bm;
    const MoeRoutingResult ref = moe_routing_reference(ids, tokens, topk, experts, bm, cap, blocks);
    SequenceKernel s;
    s.name = k.name;
    s.input.assign(ids.begin(), ids.end());
    for (const std::vector<int32_t>* part : {&ref.sorted_ids, &ref.block_expert, &ref.tokens_per_expert})
        s.expect.insert(s.expect.end(), part->begin(), part->end());
    s.expect.push_back(static_cast<uint32_t>(ref.total_padded));
    s.launch = [&k, tokens, topk, experts, cap, blocks](runtime::Stream& st, uint64_t in, uint64_t out) {
        const runtime::Location loc = st.backend().location();
        auto at = [&](uint64_t addr, int64_t words) {
            return runtime::TensorView::contiguous(reinterpret_cast<void*>(addr), runtime::DType::i32, {words}, loc);
        };
        MoeRoutingArgs a;
        a.topk_ids =
            runtime::TensorView::contiguous(reinterpret_cast<void*>(in), runtime::DType::i32, {tokens, topk}, loc);
        a.sorted_ids = at(out, cap);
        a.block_expert = at(out + 4 * cap, blocks);
        a.tokens_per_expert = at(out + 4 * (cap + blocks), experts);
        a.total_padded = at(out + 4 * (cap + blocks + experts), 1);
        launch_moe_routing(k, st, a);
    };
    return s;
}

}  // namespace kiln::test
