// Device kernels through the dispatcher on the CUDA backend (suite gpu): the Stream interface's common
// sequence with moe_routing, graph capture and replay, launch errors naming the kernel and its geometry,
// launch helpers refusing bad arguments, and memoisation. Each family against its CPU reference is the op
// harness's (tests/ops, on every backend).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "cache/store.hpp"
#include "common/moe_routing_params.h"
#include "jit/dispatcher.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/library.hpp"
#include "runtime/cuda/stream.hpp"
#include "tests/cache/cache_test_util.hpp"
#include "tests/common/backends.hpp"
#include "tests/common/tensors.hpp"
#include "tests/jit/moe_routing_sequence.hpp"

using namespace kiln::jit;
using namespace kiln::runtime;

namespace {

constexpr uint32_t k_poison = 0xa5a5a5a5u;

kiln::test::TestBackend& gpu() {
    kiln::test::TestBackend* b = kiln::test::cuda_backend();
    REQUIRE(b != nullptr);
    return *b;
}

Target target() { return gpu().disp->device_target(); }

// Distinct experts per token, as a router picks them; `skewed`: most picks among the first eighth.
std::vector<int32_t> make_ids(std::mt19937& rng, int64_t tokens, int topk, int experts, bool skewed) {
    std::vector<int32_t> ids(tokens * topk);
    const int range = skewed ? std::max(topk, experts / 8) : experts;
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int32_t> pool(experts);
        for (int e = 0; e < experts; ++e) pool[e] = e;
        for (int j = 0; j < topk; ++j) {
            std::uniform_int_distribution<int> pick(j, range - 1);
            std::swap(pool[j], pool[pick(rng)]);
            ids[t * topk + j] = pool[j];
        }
    }
    return ids;
}

// The whole buffer back as T.
template <typename T>
std::vector<T> read(Backend& b, const Buffer& buf) {
    return kiln::test::download<T>(b, buf, buf.size() / sizeof(T));
}

}  // namespace

TEST_CASE("the Stream interface's common sequence with the moe_routing device kernel") {
    kiln::test::TestBackend& b = gpu();
    for (const auto& [experts, topk, block_m] :
         {std::tuple{64, 8, 16}, std::tuple{384, 8, 64}, std::tuple{896, 16, 128}}) {
        const LoadedKernel& k = b.disp->get(MoeRoutingFamily::descriptor(experts, topk, target(), block_m));
        for (int tokens : {1, 37, 5000})
            kiln::test::run_stream_sequence(*b.backend, kiln::test::moe_routing_sequence(k, tokens, tokens));
    }
}

TEST_CASE("moe_routing is graph-capturable: a replay routes the ids present at replay time") {
    kiln::test::TestBackend& b = gpu();
    CudaBackend& be = static_cast<CudaBackend&>(*b.backend);
    const int experts = 64, topk = 8, tokens = 32;
    const LoadedKernel& k = b.disp->get(MoeRoutingFamily::descriptor(experts, topk, target(), 16));
    const int64_t cap = moe_routing_capacity(tokens, topk, experts, 16), blocks = cap / 16;
    std::mt19937 rng(99);
    std::vector<int32_t> ids = make_ids(rng, tokens, topk, experts, false);
    Buffer d_ids = upload_buffer(be, ids.data(), ids.size() * 4);
    Buffer d_sorted = be.alloc(cap * 4), d_blocks = be.alloc(blocks * 4), d_counts = be.alloc(experts * 4),
           d_total = be.alloc(4);
    MoeRoutingArgs a{d_ids.view(DType::i32, {tokens, topk}), d_sorted.view(DType::i32, {cap}),
                     d_blocks.view(DType::i32, {blocks}), d_counts.view(DType::i32, {experts}),
                     d_total.view(DType::i32, {1})};
    CudaStream s(be);
    s.begin_capture();
    launch_moe_routing(k, s, a);
    CudaStream::Graph g = s.end_capture();
    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        ids = make_ids(rng, tokens, topk, experts, round == 1);
        s.upload(d_ids.addr(), ids.data(), ids.size() * 4);
        for (const Buffer* buf : {&d_sorted, &d_blocks, &d_counts, &d_total})
            s.fill_u32(buf->addr(), k_poison, buf->size() / 4);
        g.launch(s);
        s.synchronize();
        MoeRoutingResult ref = moe_routing_reference(ids, tokens, topk, experts, 16, cap, blocks);
        CHECK(read<int32_t>(be, d_sorted) == ref.sorted_ids);
        CHECK(read<int32_t>(be, d_blocks) == ref.block_expert);
        CHECK(read<int32_t>(be, d_counts) == ref.tokens_per_expert);
        CHECK(read<int32_t>(be, d_total)[0] == ref.total_padded);
    }
}

TEST_CASE("launch helpers refuse bad arguments before launching") {
    kiln::test::TestBackend& b = gpu();
    Backend& be = *b.backend;
    const LoadedKernel& k = b.disp->get(DequantGemvFamily::descriptor(4, 64, 64, target()));
    Buffer x = be.alloc(8 * 64 * 2), p = be.alloc(64 * 8 * 4), sc = be.alloc(64 * 2 * 2), y = be.alloc(8 * 64 * 2);
    DequantGemvArgs a{x.view(DType::bf16, {8, 64}), p.view(DType::i32, {64, 8}), sc.view(DType::bf16, {64, 2}),
                      y.view(DType::bf16, {8, 64})};
    Stream& s = *b.stream;
    CHECK_THROWS_WITH_AS(launch_dequant_gemv(k, s, a), doctest::Contains("m=8 outside the kernel's M-bucket [1, 4]"),
                         kiln::InvalidArgument);
    a.y = y.view(DType::bf16, {4, 64});
    a.x = x.view(DType::f32, {4, 64});
    CHECK_THROWS_AS(launch_dequant_gemv(k, s, a), kiln::InvalidArgument);
    std::vector<uint16_t> host_x(4 * 64);
    a.x = TensorView::contiguous(host_x.data(), DType::bf16, {4, 64});  // host memory on a device stream
    CHECK_THROWS_WITH_AS(launch_dequant_gemv(k, s, a), doctest::Contains("device tensor"), kiln::InvalidArgument);
    a.x = TensorView::contiguous(reinterpret_cast<void*>(x.addr() + 2), DType::bf16, {4, 64}, Location::device);
    CHECK_THROWS_WITH_AS(launch_dequant_gemv(k, s, a), doctest::Contains("16-byte aligned"), kiln::InvalidArgument);
    MoeRoutingArgs r{};
    CHECK_THROWS_WITH_AS(launch_moe_routing(k, s, r), doctest::Contains("kernel is dequant_gemv/"),
                         kiln::InvalidArgument);  // wrong family
    s.synchronize();  // nothing was launched
    // the same arguments, each made right, launch
    a.x = x.view(DType::bf16, {4, 64});
    CHECK_NOTHROW(launch_dequant_gemv(k, s, a));
    s.synchronize();
}

TEST_CASE("a failing launch reports kernel, grid, block and shared memory") {
    kiln::test::TestBackend& b = gpu();
    const LoadedKernel& k = b.disp->get(MoeRoutingFamily::descriptor(64, 8, target(), 16));
    LaunchDims dims;
    dims.block = {2048, 1, 1};  // over the 1024-thread limit
    dims.smem = 1234;
    const kiln_params::MoeRoutingParams zeros{};
    try {
        b.stream->launch(k.handle, dims, zeros);
        FAIL("expected CudaLaunchError");
    } catch (const CudaLaunchError& e) {
        std::string m = e.what();
        CHECK(m.find("moe_routing/indexed") != std::string::npos);  // the descriptor names the kernel
        CHECK(m.find("block (2048,1,1)") != std::string::npos);
        CHECK(m.find("1234") != std::string::npos);
        CHECK(e.kernel() == k.name);
    }
    b.stream->synchronize();  // the stream is still usable
}

TEST_CASE("the dispatcher memoises: a second get is the same kernel; a fresh dispatcher loads from the cache") {
    gpu().backend->make_current();
    kiln::cache::test::TempDir dir;
    kiln::cache::Store store(kiln::cache::test::options_in(dir));
    DispatcherOptions o;
    o.store = &store;
    Dispatcher disp(o);
    KernelDescriptor d = MoeRoutingFamily::descriptor(32, 4, target(), 8);
    const LoadedKernel& a = disp.get(d);
    const LoadedKernel& b = disp.get(d);
    CHECK(&a == &b);
    CHECK(a.handle.kind == BackendKind::cuda);
    CHECK(static_cast<bool>(a.handle));
    KernelDescriptor raw = d;
    raw.m = 999;  // not canonical: same kernel
    CHECK(&disp.get(raw) == &a);
    CHECK(disp.stats().compiles == 1);
    Dispatcher fresh(o);
    const LoadedKernel& c = fresh.get(d);
    CHECK(c.key == a.key);
    CHECK(fresh.stats().compiles == 0);
    CHECK(fresh.stats().store_hits == 1);
    CHECK_FALSE(fresh.timing(c).compiled);
    CHECK(disp.stats().compiles == 1);
}
