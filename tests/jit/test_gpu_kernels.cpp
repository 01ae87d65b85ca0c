// Every family launches on the device and matches its CPU reference on random data; outputs are
// poisoned before each launch so unwritten elements show up.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "runtime/bf16.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/cuda/stream.hpp"

using namespace kiln::jit;
using namespace kiln::runtime;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t k_poison = 0xa5a5a5a5u;

struct Fixture {
    fs::path dir;
    std::unique_ptr<kiln::cache::Store> store;
    std::unique_ptr<Dispatcher> disp;
    Target target;
    Fixture() {
        std::string tmpl = (fs::temp_directory_path() / "kiln-gpu-test-XXXXXX").string();
        REQUIRE(mkdtemp(tmpl.data()) != nullptr);
        dir = tmpl;
        kiln::cache::StoreOptions so;
        so.cache_dir = dir.string();
        store = std::make_unique<kiln::cache::Store>(so);
        DispatcherOptions o;
        o.store = store.get();
        disp = std::make_unique<Dispatcher>(o);
        target = disp->device_target();
    }
    ~Fixture() {
        disp.reset();
        store.reset();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

Fixture& fixture() {
    static Fixture f;
    return f;
}

enum class Routing { uniform, skewed, one_hot, with_foreign };

std::vector<int32_t> make_ids(std::mt19937& rng, int64_t tokens, int topk, int experts, Routing kind) {
    std::vector<int32_t> ids(tokens * topk);
    for (int64_t t = 0; t < tokens; ++t) {
        // Distinct experts per token, as a router produces.
        std::vector<int32_t> pool(experts);
        for (int e = 0; e < experts; ++e) pool[e] = e;
        for (int j = 0; j < topk; ++j) {
            int32_t e;
            if (kind == Routing::one_hot) {
                e = j;  // every token hits experts 0..topk-1
            } else if (kind == Routing::skewed) {
                // Most picks among the first few experts; many experts stay empty.
                int hot = std::max(topk, experts / 8);
                std::uniform_int_distribution<int> pick(j, hot - 1);
                int idx = pick(rng);
                std::swap(pool[j], pool[idx]);
                e = pool[j];
            } else {
                std::uniform_int_distribution<int> pick(j, experts - 1);
                int idx = pick(rng);
                std::swap(pool[j], pool[idx]);
                e = pool[j];
            }
            if (kind == Routing::with_foreign && rng() % 4 == 0) e = (rng() % 2) ? -1 : experts + static_cast<int32_t>(rng() % 50);
            ids[t * topk + j] = e;
        }
    }
    return ids;
}

void check_routing(int experts, int topk, int block_m, int warps, int64_t tokens, Routing kind, uint32_t seed) {
    CAPTURE(experts);
    CAPTURE(topk);
    CAPTURE(block_m);
    CAPTURE(warps);
    CAPTURE(tokens);
    CAPTURE(static_cast<int>(kind));
    Fixture& fx = fixture();
    KernelDescriptor d = MoeRoutingFamily::descriptor(experts, topk, fx.target, block_m, warps);
    const LoadedKernel& k = fx.disp->get(d);
    std::mt19937 rng(seed);
    std::vector<int32_t> ids = make_ids(rng, tokens, topk, experts, kind);
    const int bm = d.config.block_m;
    const int64_t cap = moe_routing_capacity(tokens, topk, experts, bm) + 3 * bm;  // slack: the tail must be filled too
    const int64_t max_blocks = cap / bm;

    Stream s;
    DeviceBuffer d_ids = to_device(ids);
    DeviceBuffer d_sorted(cap * 4), d_blocks(max_blocks * 4), d_counts(experts * 4), d_total(4);
    for (const DeviceBuffer* b : {&d_sorted, &d_blocks, &d_counts, &d_total}) fill_u32(b->ptr(), k_poison, b->size() / 4);
    MoeRoutingArgs a{d_ids.view(DType::i32, {tokens, topk}), d_sorted.view(DType::i32, {cap}),
                     d_blocks.view(DType::i32, {max_blocks}), d_counts.view(DType::i32, {experts}),
                     d_total.view(DType::i32, {1})};
    launch_moe_routing(k, a, s.handle());
    s.synchronize();
    MoeRoutingResult ref = moe_routing_reference(ids, tokens, topk, experts, bm, cap, max_blocks);
    CHECK(to_host<int32_t>(d_counts) == ref.tokens_per_expert);
    CHECK(to_host<int32_t>(d_total)[0] == ref.total_padded);
    CHECK(to_host<int32_t>(d_sorted) == ref.sorted_ids);
    CHECK(to_host<int32_t>(d_blocks) == ref.block_expert);
}

}  // namespace

TEST_CASE("moe_routing matches the reference: decode and prefill sizes, several routings") {
    uint32_t seed = 1;
    for (Routing kind : {Routing::uniform, Routing::skewed, Routing::one_hot, Routing::with_foreign}) {
        check_routing(8, 2, 4, 0, 1, kind, seed++);
        check_routing(8, 2, 4, 0, 3, kind, seed++);
        check_routing(64, 8, 16, 0, 20, kind, seed++);
        check_routing(64, 8, 16, 4, 257, kind, seed++);
        check_routing(112, 16, 8, 0, 50, kind, seed++);     // K3 EP8 slice, decode
        check_routing(384, 8, 64, 0, 2048, kind, seed++);   // K2, prefill chunk
        check_routing(896, 16, 128, 0, 1000, kind, seed++); // K3 whole, 16 warps
    }
    check_routing(384, 8, 64, 32, 16384, Routing::uniform, seed++);  // large prefill
    check_routing(2048, 4, 32, 0, 300, Routing::uniform, seed++);    // 8 warps
}

TEST_CASE("moe_routing is graph-capturable: a replay routes the ids present at replay time") {
    Fixture& fx = fixture();
    const int experts = 64, topk = 8, tokens = 32;
    KernelDescriptor d = MoeRoutingFamily::descriptor(experts, topk, fx.target, 16);
    const LoadedKernel& k = fx.disp->get(d);
    const int64_t cap = moe_routing_capacity(tokens, topk, experts, 16), blocks = cap / 16;
    std::mt19937 rng(99);
    std::vector<int32_t> ids = make_ids(rng, tokens, topk, experts, Routing::uniform);
    Stream s;
    DeviceBuffer d_ids = to_device(ids);
    DeviceBuffer d_sorted(cap * 4), d_blocks(blocks * 4), d_counts(experts * 4), d_total(4);
    MoeRoutingArgs a{d_ids.view(DType::i32, {tokens, topk}), d_sorted.view(DType::i32, {cap}),
                     d_blocks.view(DType::i32, {blocks}), d_counts.view(DType::i32, {experts}),
                     d_total.view(DType::i32, {1})};
    s.begin_capture();
    launch_moe_routing(k, a, s.handle());
    Stream::Graph g = s.end_capture();
    for (int round = 0; round < 3; ++round) {
        ids = make_ids(rng, tokens, topk, experts, round == 1 ? Routing::skewed : Routing::uniform);
        copy_h2d(d_ids.ptr(), ids.data(), ids.size() * 4);
        for (const DeviceBuffer* b : {&d_sorted, &d_blocks, &d_counts, &d_total}) fill_u32(b->ptr(), k_poison, b->size() / 4);
        g.launch(s);
        s.synchronize();
        MoeRoutingResult ref = moe_routing_reference(ids, tokens, topk, experts, 16, cap, blocks);
        CHECK(to_host<int32_t>(d_sorted) == ref.sorted_ids);
        CHECK(to_host<int32_t>(d_blocks) == ref.block_expert);
        CHECK(to_host<int32_t>(d_counts) == ref.tokens_per_expert);
        CHECK(to_host<int32_t>(d_total)[0] == ref.total_padded);
    }
}

namespace {

void check_gemv(int m_bucket, int m, int n, int k, int warps, uint32_t seed) {
    CAPTURE(m_bucket);
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    Fixture& fx = fixture();
    KernelDescriptor d = DequantGemvFamily::descriptor(m_bucket, n, k, fx.target, warps);
    const LoadedKernel& kern = fx.disp->get(d);
    std::mt19937 rng(seed);
    std::normal_distribution<float> xs(0.f, 1.f), ss(0.f, 0.02f);
    std::vector<uint16_t> x(static_cast<size_t>(m) * k), scale(static_cast<size_t>(n) * (k / 32));
    std::vector<int32_t> packed(static_cast<size_t>(n) * (k / 8));
    for (auto& v : x) v = float_to_bf16(xs(rng));
    for (auto& v : scale) v = float_to_bf16(std::fabs(ss(rng)) + 1e-3f);
    for (auto& v : packed) v = static_cast<int32_t>(rng());

    Stream s;
    DeviceBuffer d_x = to_device(x), d_p = to_device(packed), d_s = to_device(scale);
    DeviceBuffer d_y(static_cast<size_t>(m) * n * 2);
    fill_u32(d_y.ptr(), 0x7fc07fc0u, d_y.size() / 4);  // bf16 NaN
    if (d_y.size() % 4) fill_u8(d_y.ptr() + d_y.size() - 2, 0xff, 2);
    DequantGemvArgs a{d_x.view(DType::bf16, {m, k}), d_p.view(DType::i32, {n, k / 8}),
                      d_s.view(DType::bf16, {n, k / 32}), d_y.view(DType::bf16, {m, n})};
    launch_dequant_gemv(kern, a, s.handle());
    s.synchronize();
    std::vector<uint16_t> y = to_host<uint16_t>(d_y);
    std::vector<double> ref = dequant_gemv_reference(x, m, packed, scale, n, k);
    double num = 0, den = 0, worst = 0;
    size_t nan = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        double got = bf16_to_float(y[i]);
        if (std::isnan(got)) ++nan;
        num += (got - ref[i]) * (got - ref[i]);
        den += ref[i] * ref[i];
    }
    double rms = std::sqrt(den / ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        double err = std::fabs(bf16_to_float(y[i]) - ref[i]);
        // bf16 output rounding (2^-9 relative) plus fp32 accumulation, with a floor for values near 0.
        worst = std::max(worst, err / (std::fabs(ref[i]) * (1.0 / 256) + 1e-4 * rms));
    }
    CHECK(nan == 0);
    CHECK(std::sqrt(num / den) < 4e-3);
    CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("dequant_gemv matches the fp64 reference") {
    check_gemv(1, 1, 256, 512, 0, 11);
    check_gemv(4, 3, 1000, 2048, 0, 12);   // m below the bucket, N not a multiple of the CTA rows
    check_gemv(8, 8, 4096, 7168, 4, 13);   // K2 gate_up-like shape
    check_gemv(16, 16, 512, 4096, 16, 14);
    check_gemv(2, 2, 7, 32, 1, 15);        // one group per row
}

TEST_CASE("launch helpers refuse bad arguments before launching") {
    Fixture& fx = fixture();
    const LoadedKernel& k = fx.disp->get(DequantGemvFamily::descriptor(4, 64, 64, fx.target));
    DeviceBuffer x(8 * 64 * 2), p(64 * 8 * 4), sc(64 * 2 * 2), y(8 * 64 * 2);
    DequantGemvArgs a{x.view(DType::bf16, {8, 64}), p.view(DType::i32, {64, 8}), sc.view(DType::bf16, {64, 2}),
                      y.view(DType::bf16, {8, 64})};
    Stream s;
    CHECK_THROWS_AS(launch_dequant_gemv(k, a, s.handle()), kiln::InvalidArgument);  // m = 8 > bucket 4
    a.x = x.view(DType::f32, {4, 64});
    CHECK_THROWS_AS(launch_dequant_gemv(k, a, s.handle()), kiln::InvalidArgument);
    MoeRoutingArgs r{};
    CHECK_THROWS_AS(launch_moe_routing(k, r, s.handle()), kiln::InvalidArgument);  // wrong family
}

TEST_CASE("a failing launch reports kernel, grid, block and shared memory") {
    Fixture& fx = fixture();
    const LoadedKernel& k = fx.disp->get(MoeRoutingFamily::descriptor(64, 8, fx.target, 16));
    Stream s;
    LaunchDims dims;
    dims.block = {2048, 1, 1};  // over the 1024-thread limit
    dims.smem = 1234;
    uint64_t zeros[8] = {};
    void* args[8];
    for (int i = 0; i < 8; ++i) args[i] = &zeros[i];
    try {
        launch(k.kernel, dims, s.handle(), args);
        FAIL("expected CudaLaunchError");
    } catch (const CudaLaunchError& e) {
        std::string m = e.what();
        CHECK(m.find("moe_routing_indexed") != std::string::npos);
        CHECK(m.find("block (2048,1,1)") != std::string::npos);
        CHECK(m.find("1234") != std::string::npos);
    }
}

TEST_CASE("the dispatcher memoises: a second get is the same kernel; a fresh dispatcher loads from the cache") {
    Fixture& fx = fixture();
    KernelDescriptor d = MoeRoutingFamily::descriptor(32, 4, fx.target, 8);
    const LoadedKernel& a = fx.disp->get(d);
    const LoadedKernel& b = fx.disp->get(d);
    CHECK(&a == &b);
    KernelDescriptor raw = d;
    raw.m = 999;  // not canonical: same kernel
    CHECK(&fx.disp->get(raw) == &a);
    auto before = fx.disp->stats();
    DispatcherOptions o;
    o.store = fx.store.get();
    Dispatcher fresh(o);
    const LoadedKernel& c = fresh.get(d);
    CHECK(c.key == a.key);
    CHECK(fresh.stats().compiles == 0);
    CHECK(fresh.stats().store_hits == 1);
    CHECK_FALSE(fresh.timing(c).compiled);
    CHECK(fx.disp->stats().compiles == before.compiles);
}
