// The moe_w4a16 layer (model/layers/moe_w4a16) without running it: plan() follows the tuning's thresholds
// (autotune/heuristics/moe_w4a16), and the layer refuses weights it cannot read, tunings out of range and
// calls that do not match the plan, before anything is enqueued. Its output against the CPU reference, on
// every backend and path, is the op harness's (tests/ops/moe_w4a16*.cpp).
#include <doctest/doctest.h>

#include <cstddef>
#include <random>
#include <vector>

#include "autotune/heuristics/moe_w4a16.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "model/layers/moe_w4a16.hpp"
#include "runtime/error.hpp"
#include "runtime/host/stream.hpp"
#include "tests/common/backends.hpp"

using namespace kiln;
using model::layers::MoeW4A16;
using model::layers::MoeW4A16Path;
using model::layers::MoeW4A16Plan;
using model::layers::MoeW4A16Shape;
using model::layers::MoeW4A16Tensors;
namespace w = model::weights;

namespace {

// Prepared weights of `experts` random matrices (gate_up: two [n, k] halves per expert).
w::PreparedMoeWeights prepared(w::W4Format f, w::W4Layout l, bool gate_up, int experts, int n, int k) {
    std::mt19937 rng(static_cast<uint32_t>(n * 131 + k * 7 + gate_up));
    const bool int4 = f == w::W4Format::int4_g32_bf16;
    std::vector<std::byte> packed(int4 ? size_t(n) * (k / 8) * 4 : size_t(n) * (k / 2));
    std::vector<std::byte> scale(size_t(n) * (k / 32) * (int4 ? 2 : 1));
    for (auto& b : packed) b = std::byte(rng());
    for (size_t i = 0; i < scale.size(); ++i)  // bf16 0.01 (0x3c24), or an E8M0 exponent of 2^-7
        scale[i] = std::byte(int4 ? (i % 2 ? 0x3c : 0x24) : 120);
    return w::prepare_moe_weights(f, l, gate_up, experts, n, k, [&](int, int) {
        return w::CheckpointMatrix{packed, scale};
    });
}

constexpr w::W4Format k_int4 = w::W4Format::int4_g32_bf16;
constexpr w::W4Layout k_decode = w::W4Layout::decode_mma16;

test::TestBackend* host() {
    test::TestBackend* b = test::host_backend();
    if (b == nullptr) MESSAGE("skipped: this kiln has no host target (built without host_jit)");
    return b;
}

// The layer every case starts from: 4 INT4 experts of hidden 64, intermediate 64, top-2.
struct Layer {
    w::PreparedMoeWeights gu = prepared(k_int4, k_decode, true, 4, 64, 64);
    w::PreparedMoeWeights dn = prepared(k_int4, k_decode, false, 4, 64, 64);
    MoeW4A16Shape shape;
    autotune::MoeW4A16Tuning tuning = autotune::default_moe_w4a16_tuning(jit::WeightFormat::int4_g32_bf16);
    explicit Layer(int max_tokens) {
        shape.topk = 2;
        shape.max_tokens = max_tokens;
    }
};

}  // namespace

TEST_CASE("moe_w4a16 layer: the plan follows the tuning's thresholds") {
    test::TestBackend* b = host();
    if (b == nullptr) return;
    Layer l(512);
    const w::PreparedMoeWeights &gu = l.gu, &dn = l.dn;
    const MoeW4A16Shape& shape = l.shape;
    autotune::MoeW4A16Tuning& t = l.tuning;
    t.rows_combine_min = 16;  // rows + combine from 16 routed slots (8 tokens)
    t.prefill_min = 100;      // the prefill GEMMs from 100 slots per expert: 400 slots, 200 tokens
    t.tiles = 1;
    MoeW4A16 layer(*b->disp, *b->backend, gu, dn, shape, t);
    CHECK(layer.hidden() == 64);
    CHECK(layer.tiles() == 1);
    CHECK(layer.fused_max_slots() == 0);  // the host target has no fused kernel
    for (const jit::LoadedKernel* k : layer.kernels()) CHECK(k->desc.target.is_host());

    const MoeW4A16Plan p7 = layer.plan(7), p8 = layer.plan(8), p199 = layer.plan(199), p200 = layer.plan(200);
    CHECK(p7.path == MoeW4A16Path::decode);
    CHECK(p8.path == MoeW4A16Path::decode_rows);
    CHECK(p199.path == MoeW4A16Path::decode_rows);
    CHECK(p200.path == MoeW4A16Path::prefill);
    CHECK(layer.plan(0).path == MoeW4A16Path::decode);
    CHECK(layer.plan(512).path == MoeW4A16Path::prefill);
    // the decode paths: m-blocks of 8 rows, the static schedule on the host, a combine only with rows
    for (const MoeW4A16Plan& p : {p7, p8}) {
        CHECK(p.block_m == 8);
        CHECK_FALSE(p.gate_up_dynamic);
        CHECK_FALSE(p.down_dynamic);
        CHECK(p.route->desc.family.view() == jit::MoeW4A16RouteFamily::k_name);
        CHECK(p.gate_up->desc.family.view() == jit::MoeW4A16DecodeFamily::k_name);
        CHECK(p.down->desc.config.as<jit::MoeW4A16DecodeConfig>().rows == (p.rows() ? 1 : 0));
        CHECK((p.combine != nullptr) == p.rows());
    }
    // the prefill path: m-blocks of 64 (the host has no warpgroup MMAs), the prefill GEMMs, rows + combine
    CHECK(p200.block_m == 64);
    CHECK(p200.route->desc.config.as<jit::MoeW4A16RouteConfig>().block_m == 64);
    CHECK(p200.gate_up->desc.family.view() == jit::MoeW4A16PrefillFamily::k_name);
    CHECK(p200.down->desc.family.view() == jit::MoeW4A16PrefillFamily::k_name);
    CHECK(p200.combine != nullptr);
    CHECK(p200.mblock_cap == model::layers::moe_w4a16_mblock_capacity(400, 4, 64));
    CHECK_THROWS_WITH_AS(layer.plan(513), doctest::Contains("513 tokens, the workspace holds 512"), InvalidArgument);
    CHECK_THROWS_AS(layer.plan(-1), InvalidArgument);

    // never rows, never prefill: every call takes the fp32-atomic decode path
    t.rows_combine_min = -1;
    t.prefill_min = -1;
    MoeW4A16 plain(*b->disp, *b->backend, gu, dn, shape, t);
    CHECK(plain.plan(512).path == MoeW4A16Path::decode);
}

TEST_CASE("moe_w4a16 layer: weights it cannot read and bad tunings are refused") {
    test::TestBackend* b = host();
    if (b == nullptr) return;
    const Layer l(16);
    const w::PreparedMoeWeights &gu = l.gu, &dn = l.dn;
    const MoeW4A16Shape& shape = l.shape;
    const autotune::MoeW4A16Tuning& t = l.tuning;
    auto make = [&](const w::PreparedMoeWeights& g, const w::PreparedMoeWeights& d, const MoeW4A16Shape& s,
                    const autotune::MoeW4A16Tuning& tu) { MoeW4A16 layer(*b->disp, *b->backend, g, d, s, tu); };
    CHECK_NOTHROW(make(gu, dn, shape, t));
    // swapped matrices: plain matrices are not interleaved gate/up
    CHECK_THROWS_WITH_AS(make(dn, gu, shape, t), doctest::Contains("interleaved gate/up"), InvalidArgument);
    CHECK_THROWS_WITH_AS(make(gu, gu, shape, t), doctest::Contains("must be the down matrices"), InvalidArgument);
    // prefill-packed weights: the kernels read the decode layout
    const w::PreparedMoeWeights pre = prepared(k_int4, w::W4Layout::prefill_mma16, true, 4, 64, 64);
    try {
        make(pre, dn, shape, t);
        FAIL("prefill-packed weights accepted");
    } catch (const InvalidArgument& e) {
        CHECK(std::string(e.what()).find("decode_mma16") != std::string::npos);
        CHECK(std::string(e.what()).find("prefill_mma16") != std::string::npos);
    }
    // formats, expert counts and shapes that do not chain
    CHECK_THROWS_AS(make(gu, prepared(w::W4Format::mxfp4_g32_e8m0, k_decode, false, 4, 64, 64), shape, t),
                    InvalidArgument);
    CHECK_THROWS_WITH_AS(make(gu, prepared(k_int4, k_decode, false, 3, 64, 64), shape, t),
                         doctest::Contains("4 gate_up experts but 3 down experts"), InvalidArgument);
    CHECK_THROWS_WITH_AS(make(gu, prepared(k_int4, k_decode, false, 4, 128, 64), shape, t),
                         doctest::Contains("does not chain"), InvalidArgument);
    MoeW4A16Shape bad = shape;
    bad.topk = 0;
    CHECK_THROWS_AS(make(gu, dn, bad, t), InvalidArgument);
    bad = shape;
    bad.ep_size = 0;
    CHECK_THROWS_WITH_AS(make(gu, dn, bad, t), doctest::Contains("ep_size=0"), InvalidArgument);
    // tunings out of range, and the warp-specialised prefill on a target without warpgroup MMAs
    autotune::MoeW4A16Tuning tu = t;
    tu.tiles = 3;
    CHECK_THROWS_WITH_AS(make(gu, dn, shape, tu), doctest::Contains("tiles=3"), InvalidArgument);
    tu = t;
    tu.prefill_block_m = 128;
    CHECK_THROWS_WITH_AS(make(gu, dn, shape, tu), doctest::Contains("needs the warpgroup-MMA prefill"),
                         InvalidArgument);
}

TEST_CASE("moe_w4a16 layer: a call that does not match its plan is refused before anything is enqueued") {
    test::TestBackend* b = host();
    if (b == nullptr) return;
    const Layer l(16);
    const w::PreparedMoeWeights &gu = l.gu, &dn = l.dn;
    MoeW4A16 layer(*b->disp, *b->backend, gu, dn, l.shape, l.tuning);
    runtime::Backend& be = *b->backend;
    runtime::Buffer wgu = runtime::upload_buffer(be, gu.bytes.data(), gu.bytes.size());
    runtime::Buffer wdn = runtime::upload_buffer(be, dn.bytes.data(), dn.bytes.size());
    runtime::Buffer x = be.alloc(4 * 64 * 2), ids = be.alloc(4 * 2 * 4), wt = be.alloc(4 * 2 * 4),
                    out = be.alloc(4 * 64 * 2);
    const MoeW4A16Plan p = layer.plan(4);
    MoeW4A16Tensors good;
    good.gate_up = wgu.addr();
    good.down = wdn.addr();
    good.x = x.view(runtime::DType::bf16, {4, 64});
    good.topk_ids = ids.view(runtime::DType::i32, {4, 2});
    good.topk_weights = wt.view(runtime::DType::f32, {4, 2});
    good.out = out.view(runtime::DType::bf16, {4, 64});
    runtime::Stream& s = *b->stream;
    auto refused = [&](MoeW4A16Tensors t, const char* what) {
        CAPTURE(what);
        CHECK_THROWS_AS(layer.run(p, t, s), InvalidArgument);
    };
    MoeW4A16Tensors t = good;
    t.x.data = nullptr;
    refused(t, "null x");
    t = good;
    t.x = x.view(runtime::DType::bf16, {2, 128});
    refused(t, "x of another hidden size");
    t = good;
    t.topk_ids = ids.view(runtime::DType::f32, {4, 2});
    refused(t, "top-k ids of another dtype");
    t = good;
    t.topk_weights = wt.view(runtime::DType::f32, {8, 1});
    refused(t, "top-k weights of another top-k");
    t = good;
    t.out = out.view(runtime::DType::bf16, {3, 64});
    refused(t, "out of another token count");
    t = good;
    t.out.location = runtime::Location::device;
    refused(t, "out in another backend's memory");
    t = good;
    t.down = 0;
    refused(t, "null weights");
    t = good;
    t.x.data = static_cast<char*>(x.data()) + 2;
    refused(t, "misaligned x");
    runtime::HostBackend other;
    std::unique_ptr<runtime::Stream> foreign = other.create_stream();
    CHECK_THROWS_WITH_AS(layer.run(p, good, *foreign), doctest::Contains("a stream of another backend"),
                         InvalidArgument);
    s.synchronize();  // nothing was enqueued, so nothing failed
}

TEST_CASE("moe_w4a16 heuristics: the dynamic schedule's K split and its scratch") {
    // automatic: the kernel decides from the real m-block count, aiming at items_per_group per group
    const auto gu = autotune::decode_split(-1, 528, autotune::k_gate_up_items_per_group);
    CHECK(gu.k_chunk == -autotune::k_split_min_records);
    CHECK(gu.split_max_items == 2 * 528);
    const auto dn = autotune::decode_split(-1, 528, autotune::k_down_items_per_group);
    CHECK(dn.split_max_items == 8 * 528);
    // explicit chunks always apply; 0 is whole K
    CHECK(autotune::decode_split(6, 528, 2).k_chunk == 6);
    CHECK(autotune::decode_split(6, 528, 2).split_max_items > 1000000);
    CHECK(autotune::decode_split(0, 528, 2).k_chunk == 0);
    CHECK(autotune::split_scratch_items(1 << 30, 32) == (64 << 20) / (128 * 32 * 4));
    CHECK(autotune::split_scratch_items(1056, 8) == 1056);
}
