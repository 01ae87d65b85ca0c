// The MLA layer's host-side logic (model/layers/mla, autotune/heuristics/mla): how a step is split into context
// pieces, which attention kernels a step launches, and the refusals of malformed dims, tunings, steps and
// tensors. Its numerics are the op cases' (tests/ops/mla*.cpp).
#include <doctest/doctest.h>

#include <string>

#include "autotune/heuristics/mla.hpp"
#include "model/layers/mla.hpp"
#include "runtime/error.hpp"
#include "tests/common/backends.hpp"

using kiln::InvalidArgument;
using kiln::autotune::choose_mla_split;
using kiln::autotune::MlaTuning;
using kiln::model::layers::MlaDims;
using kiln::model::layers::MlaLayer;
namespace forward = kiln::model::forward;

TEST_CASE("context pieces: none where the CTAs fill the device, more for few long sequences, within the limits") {
    const MlaTuning t;
    // bs 64, 96 heads in blocks of 16: 384 CTAs on 132 SMs
    MlaTuning fma = t;
    fma.decode_mma = false;
    fma.decode_heads_per_cta = 16;
    auto s = choose_mla_split(fma, 4096, 64 * 6, 64 * 96, 132);
    CHECK(s.splits == 1);
    CHECK(s.split_keys == 4096);
    // bs 4 x 32k: 24 CTAs, 11 pieces bring them to 2 per SM
    s = choose_mla_split(t, 32768, 4 * 6, 4 * 96, 132);
    CHECK(s.splits == 11);
    CHECK(s.split_keys == 3008);
    CHECK(int64_t(s.splits) * s.split_keys >= 32768);
    // short contexts are not split below min_split_keys; a context of 300 gets one piece of 320
    s = choose_mla_split(t, 300, 1, 96, 132);
    CHECK(s.splits == 1);
    CHECK(s.split_keys == 320);
    // max_splits and the workspace bound the pieces
    s = choose_mla_split(t, 1 << 20, 1, 96, 132);
    CHECK(s.splits == t.max_splits);
    MlaTuning small = t;
    small.partial_rows = 96 * 3;
    s = choose_mla_split(small, 1 << 20, 1, 96, 132);
    CHECK(s.splits == 3);
}

TEST_CASE("tunings out of range are refused, naming the field") {
    const auto message = [](MlaTuning t) {
        try {
            kiln::autotune::validate(t);
        } catch (const InvalidArgument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    MlaTuning t;
    CHECK(message(t).empty());
    t.decode_heads_per_cta = 12;
    CHECK(message(t).find("decode_heads_per_cta=12") != std::string::npos);
    t = {};
    t.decode_heads_per_cta = 16;
    CHECK(message(t).find("decode_mma needs decode_heads_per_cta=32") != std::string::npos);
    t.decode_mma = false;
    CHECK(message(t).empty());
    t = {};
    t.prefill_heads_per_cta = 4;
    CHECK(message(t).find("prefill_mma needs 32 rows, not 4 x 4") != std::string::npos);
    t = {};
    t.min_split_keys = 100;
    CHECK(message(t).find("min_split_keys=100") != std::string::npos);
    t = {};
    t.max_splits = 65;
    CHECK(message(t).find("max_splits=65") != std::string::npos);
}

namespace {

forward::MemoryLayout layout_of(int cache_dim, int page_size) {
    forward::MemoryLayout m;
    m.cache_dim = cache_dim;
    m.page_size = page_size;
    m.mla_offset = {0};
    m.page_bytes = (uint64_t(page_size) * cache_dim * 2 + 255) / 256 * 256;
    return m;
}

forward::StepIndexHost step(const std::vector<std::pair<int, int>>& seqs, int page_size) {
    forward::ForwardBatch b;
    int pages = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        forward::SequenceStep q;
        q.start = seqs[i].first;
        q.tokens.assign(size_t(seqs[i].second), 1);
        q.slot = int32_t(i);
        const int need = (q.start + seqs[i].second + page_size - 1) / page_size;
        for (int p = 0; p < need; ++p) q.pages.push_back(pages++);
        b.seqs.push_back(std::move(q));
    }
    forward::StepLimits lim;
    lim.num_slots = int32_t(seqs.size());
    lim.num_pages = pages;
    lim.page_size = page_size;
    return forward::build_step_index(b, lim);
}

}  // namespace

TEST_CASE("the plan launches decode for single tokens and prefill for chunks; malformed layers and steps are refused") {
    kiln::test::TestBackend* b = kiln::test::host_backend();
    if (!b) return;  // kiln built without the host JIT
    const MlaDims dims{4, 64, 32, 16, 48};
    MlaLayer layer(*b->disp, *b->backend, dims, layout_of(80, 16), 0, 100);

    auto p = layer.plan(step({{10, 1}, {0, 1}}, 16));
    CHECK(p.decode);
    CHECK_FALSE(p.prefill);
    CHECK(p.max_kv == 11);
    p = layer.plan(step({{10, 1}, {40, 20}}, 16));
    CHECK(p.decode);
    CHECK(p.prefill);
    CHECK(p.max_kv == 60);
    p = layer.plan(step({{0, 30}}, 16));
    CHECK_FALSE(p.decode);
    CHECK(p.prefill);
    CHECK(p.splits * p.split_keys >= p.max_kv);
    CHECK_THROWS_AS(layer.plan(step({{0, 101}}, 16)), InvalidArgument);

    // the layout must hold d_c + d_r values per token, and the MLA layer must exist in it
    CHECK_THROWS_AS(MlaLayer(*b->disp, *b->backend, dims, layout_of(96, 16), 0, 100), InvalidArgument);
    CHECK_THROWS_AS(MlaLayer(*b->disp, *b->backend, dims, layout_of(80, 16), 1, 100), InvalidArgument);
    // d_c must suit the kernels (a multiple of 64)
    CHECK_THROWS_AS(MlaLayer(*b->disp, *b->backend, MlaDims{4, 96, 32, 16, 48}, layout_of(112, 16), 0, 100),
                    InvalidArgument);

    // a shared workspace: two layers of one model use it; one of other dims or with less room is refused
    auto ws = std::make_shared<kiln::model::layers::MlaWorkspace>(*b->backend, dims, 100, MlaTuning{});
    forward::MemoryLayout two = layout_of(80, 16);
    two.mla_offset = {0, two.page_bytes};
    two.page_bytes *= 2;
    MlaLayer first(*b->disp, *b->backend, dims, two, 0, 100, MlaTuning{}, ws);
    MlaLayer second(*b->disp, *b->backend, dims, two, 1, 64, MlaTuning{}, ws);
    CHECK(second.plan(step({{3, 64}}, 16)).prefill);
    CHECK_THROWS_AS(MlaLayer(*b->disp, *b->backend, dims, two, 1, 101, MlaTuning{}, ws), InvalidArgument);
    CHECK_THROWS_AS(MlaLayer(*b->disp, *b->backend, MlaDims{8, 64, 32, 16, 48}, two, 1, 10, MlaTuning{}, ws),
                    InvalidArgument);
    MlaTuning more;
    more.partial_rows = MlaTuning{}.partial_rows * 2;
    CHECK_THROWS_AS(MlaLayer(*b->disp, *b->backend, dims, two, 1, 10, more, ws), InvalidArgument);

    // run: tensors of the wrong shape and a step index of another plan are refused before anything runs
    const auto idx_host = step({{10, 1}, {40, 20}}, 16);
    p = layer.plan(idx_host);
    auto arena = b->backend->alloc(64 * 1024);
    forward::StepIndexStaging staging;
    const auto layout = layout_of(80, 16);
    const kiln_params::StepIndex idx = staging.upload(idx_host, arena.addr(), arena.size(), 256, layout.page_bytes, 16,
                                                      *b->backend, *b->stream);
    const int64_t T = 21;
    auto q = b->backend->alloc(size_t(T) * 4 * 48 * 2), lr = b->backend->alloc(size_t(T) * 80 * 2),
         kvb = b->backend->alloc(size_t(4) * 80 * 64 * 2), out = b->backend->alloc(size_t(T) * 4 * 48 * 2);
    using kiln::runtime::DType;
    kiln::model::layers::MlaTensors t;
    t.q = q.view(DType::bf16, {T, 4 * 48});
    t.latent = lr.view(DType::bf16, {T, 64});
    t.latent.strides[0] = 80;
    t.k_rope = kiln::runtime::TensorView::contiguous(lr.as<uint16_t>() + 64, DType::bf16, {T, 16});
    t.k_rope.strides[0] = 80;
    t.kv_b = kvb.view(DType::bf16, {4 * 80, 64});
    t.out = out.view(DType::bf16, {T, 4 * 48});
    kiln::model::layers::MlaTensors bad = t;
    bad.q = q.view(DType::bf16, {T, 4 * 40});
    CHECK_THROWS_AS(layer.run(p, bad, idx, *b->stream), InvalidArgument);
    bad = t;
    bad.out = out.view(DType::bf16, {T - 1, 4 * 48});
    CHECK_THROWS_AS(layer.run(p, bad, idx, *b->stream), InvalidArgument);
    const auto other = layer.plan(step({{10, 1}}, 16));
    CHECK_THROWS_AS(layer.run(other, t, idx, *b->stream), InvalidArgument);
    b->stream->synchronize();
}
