// Every family's host kernel against its CPU reference on random shapes (odd sizes included),
// outputs poisoned first; the host object cache in SQLite; the registry's host-template rule.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "jit/dispatcher.hpp"
#include "jit/family.hpp"
#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "jit/family_moe_w4a16.hpp"
#include "jit/host_compiler.hpp"
#include "jit/host_kernel_loader.hpp"
#include "jit/host_launch.hpp"
#include "runtime/bf16.hpp"
#include "runtime/host/stream.hpp"
#include "tests/cache/cache_test_util.hpp"

using namespace kiln;
using namespace kiln::jit;
using runtime::DType;
using runtime::Location;
using runtime::TensorView;

namespace {

constexpr int32_t k_poison_i32 = -123456789;
constexpr uint16_t k_poison_bf16 = 0x7fc1;  // a NaN

struct RoutingCase {
    int tokens, experts, topk, block_m;
    double invalid_fraction;  // ids outside [0, experts): dropped
    int64_t extra_capacity;   // sorted_ids / block_expert larger than needed
};

void check_routing(HostKernelLoader& loader, runtime::HostStream& stream, const RoutingCase& c, uint64_t seed) {
    CAPTURE(c.tokens);
    CAPTURE(c.experts);
    CAPTURE(c.topk);
    CAPTURE(c.block_m);
    const KernelDescriptor d = MoeRoutingFamily::descriptor(c.experts, c.topk, Target::host_target(), c.block_m);
    const LoadedKernel& k = loader.get(d);
    REQUIRE(static_cast<bool>(k.host_entry));

    std::mt19937_64 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(c.tokens) * c.topk);
    // Skewed routing: half the picks go to a few hot experts.
    std::uniform_int_distribution<int> any(0, c.experts - 1), hot(0, std::min(3, c.experts - 1));
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& id : ids) {
        if (u(rng) < c.invalid_fraction) id = (rng() & 1) ? -1 - static_cast<int>(rng() % 5) : c.experts + static_cast<int>(rng() % 7);
        else id = u(rng) < 0.5 ? hot(rng) : any(rng);
    }
    const int64_t cap = moe_routing_capacity(c.tokens, c.topk, c.experts, c.block_m) + c.extra_capacity;
    const int64_t blocks = cap / c.block_m + c.extra_capacity;
    std::vector<int32_t> sorted(cap, k_poison_i32), block(blocks, k_poison_i32), counts(c.experts, k_poison_i32),
        total(1, k_poison_i32);
    MoeRoutingArgs a;
    a.topk_ids = TensorView::contiguous(ids.data(), DType::i32, {c.tokens, c.topk});
    a.sorted_ids = TensorView::contiguous(sorted.data(), DType::i32, {cap});
    a.block_expert = TensorView::contiguous(block.data(), DType::i32, {blocks});
    a.tokens_per_expert = TensorView::contiguous(counts.data(), DType::i32, {c.experts});
    a.total_padded = TensorView::contiguous(total.data(), DType::i32, {1});
    launch_moe_routing(k, a, stream);
    stream.synchronize();

    MoeRoutingResult ref = moe_routing_reference(ids, c.tokens, c.topk, c.experts, c.block_m, cap, blocks);
    CHECK(total[0] == ref.total_padded);
    CHECK(counts == ref.tokens_per_expert);
    CHECK(sorted == ref.sorted_ids);
    CHECK(block == ref.block_expert);
}

struct GemvCase {
    int m_bucket, m, n, k;
};

void check_gemv(HostKernelLoader& loader, runtime::HostStream& stream, const GemvCase& c, uint64_t seed) {
    CAPTURE(c.m_bucket);
    CAPTURE(c.m);
    CAPTURE(c.n);
    CAPTURE(c.k);
    const KernelDescriptor d = DequantGemvFamily::descriptor(c.m_bucket, c.n, c.k, Target::host_target());
    const LoadedKernel& kern = loader.get(d);
    REQUIRE(static_cast<bool>(kern.host_entry));
    CHECK(kern.host_scratch_bytes == static_cast<uint64_t>(c.m_bucket) * c.k * 4);

    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> xd(-2.f, 2.f), sd(0.002f, 0.05f);
    std::vector<uint16_t> x(static_cast<size_t>(c.m) * c.k), scale(static_cast<size_t>(c.n) * (c.k / 32));
    std::vector<int32_t> packed(static_cast<size_t>(c.n) * (c.k / 8));
    for (auto& v : x) v = runtime::float_to_bf16(xd(rng));
    for (auto& v : scale) v = runtime::float_to_bf16(sd(rng) * ((rng() & 7) == 0 ? -1.f : 1.f));
    for (auto& w : packed) w = static_cast<int32_t>(static_cast<uint32_t>(rng()));
    // One row more than m, poisoned: it must stay untouched.
    std::vector<uint16_t> y(static_cast<size_t>(c.m + 1) * c.n, k_poison_bf16);

    DequantGemvArgs a;
    a.x = TensorView::contiguous(x.data(), DType::bf16, {c.m, c.k});
    a.weight_packed = TensorView::contiguous(packed.data(), DType::i32, {c.n, c.k / 8});
    a.weight_scale = TensorView::contiguous(scale.data(), DType::bf16, {c.n, c.k / 32});
    a.y = TensorView::contiguous(y.data(), DType::bf16, {c.m, c.n});
    launch_dequant_gemv(kern, a, stream);
    stream.synchronize();

    std::vector<double> ref = dequant_gemv_reference(x, c.m, packed, scale, c.n, c.k);
    // Scale of the terms, for the fp32 accumulation bound.
    int bad = 0;
    for (int r = 0; r < c.m; ++r)
        for (int n = 0; n < c.n; ++n) {
            double mag = 0;
            for (int kk = 0; kk < c.k; ++kk) {
                const uint32_t word = static_cast<uint32_t>(packed[static_cast<size_t>(n) * (c.k / 8) + kk / 8]);
                const int code = static_cast<int>((word >> (4 * (kk % 8))) & 0xfu) - 8;
                mag += std::fabs(code * runtime::bf16_to_float(scale[static_cast<size_t>(n) * (c.k / 32) + kk / 32]) *
                                 runtime::bf16_to_float(x[static_cast<size_t>(r) * c.k + kk]));
            }
            const double want = ref[static_cast<size_t>(r) * c.n + n];
            const double got = runtime::bf16_to_float(y[static_cast<size_t>(r) * c.n + n]);
            // bf16 output rounding (2^-8 relative) + fp32 accumulation over K terms.
            const double tol = std::ldexp(std::fabs(want), -8) + 1e-6 * mag + 1e-30;
            if (!(std::fabs(got - want) <= tol) && bad++ < 5)
                FAIL_CHECK(fmt::format("y[{}, {}] = {} want {} (tol {})", r, n, got, want, tol));
        }
    CHECK(bad == 0);
    for (int n = 0; n < c.n; ++n) REQUIRE(y[static_cast<size_t>(c.m) * c.n + n] == k_poison_bf16);
}

}  // namespace

// Host descriptors that exercise every kernel of a family; a family missing here fails the test.
std::vector<KernelDescriptor> host_descriptors(const Family& f) {
    const Target host = Target::host_target();
    if (f.name() == "dequant_gemv") return {DequantGemvFamily::descriptor(1, 64, 64, host)};
    if (f.name() == "moe_routing") return {MoeRoutingFamily::descriptor(8, 2, host)};
    if (f.name() == "moe_w4a16") {
        std::vector<KernelDescriptor> out = {MoeW4A16Family::routing(8, 1, host)};
        for (MoeW4A16Kernel k : {MoeW4A16Kernel::gate_up, MoeW4A16Kernel::down, MoeW4A16Kernel::dequant}) {
            KernelDescriptor d;
            d.family = ShortName("moe_w4a16");
            d.weight_format = WeightFormat::mxfp4_g32_e8m0;
            d.n = 128;
            d.k = 96;
            d.target = host;
            d.config.flags = static_cast<uint32_t>(k);
            out.push_back(d);
        }
        return out;
    }
    FAIL("no host descriptor for family " << std::string(f.name()) << ": add one to this test");
    return {};
}

TEST_CASE("every built-in family has a host template that compiles") {
    HostKernelLoader loader;
    for (const Family* f : builtin_families().list()) {
        CAPTURE(std::string(f->name()));
        REQUIRE(f->has_host_source());
        for (const KernelDescriptor& d : host_descriptors(*f)) {
            const LoadedKernel& k = loader.get(d);
            CHECK(static_cast<bool>(k.host_entry));
            CHECK(k.desc.target.is_host());
            HostKernelSource src = loader.source(k.desc);
            CHECK(!src.headers.empty());
            for (const auto& [name, bytes] : src.headers) CHECK(name.rfind("host/", 0) == 0);
        }
    }
}

TEST_CASE("a family without a host template is refused at registration") {
    struct DeviceOnly final : Family {
        std::string_view name() const override { return "device_only"; }
        std::string_view summary() const override { return "test"; }
        std::vector<std::string> modes() const override { return {"x"}; }
        std::string_view dims() const override { return ""; }
        KernelDescriptor canonicalize(const KernelDescriptor& d) const override { return d; }
        DeviceSource device_source(const KernelDescriptor&) const override { return {}; }
        uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
    };
    FamilyRegistry r;
    CHECK_THROWS_WITH_AS(r.add(std::make_unique<DeviceOnly>()),
                         doctest::Contains("kernel family 'device_only' has no host template"), InvalidArgument);
    CHECK(r.find("device_only") == nullptr);
    register_builtin_families(r);
    CHECK(r.list().size() == builtin_families().list().size());
}

TEST_CASE("moe_routing host kernel matches the reference") {
    HostKernelLoader loader;
    runtime::HostStream stream;
    const RoutingCase cases[] = {
        {1, 1, 1, 1, 0.0, 0},       {1, 8, 2, 64, 0.0, 0},     {3, 7, 3, 5, 0.2, 3},
        {17, 64, 8, 16, 0.05, 0},   {33, 257, 16, 64, 0.1, 9}, {1000, 384, 8, 64, 0.0, 0},
        {3000, 896, 16, 128, 0.01, 130}, {5000, 64, 6, 7, 0.02, 0},  // > 4096 rows: several slices
        {777, 2, 2, 1, 0.3, 1},
    };
    uint64_t seed = 1;
    for (const auto& c : cases) check_routing(loader, stream, c, seed++);
    // Same kernel, different token counts (M is not baked in).
    for (int tokens : {1, 2, 9, 4097, 2000}) check_routing(loader, stream, {tokens, 96, 8, 32, 0.02, 0}, seed++);
}

TEST_CASE("moe_routing host launch checks its arguments") {
    HostKernelLoader loader;
    runtime::HostStream stream;
    const LoadedKernel& k = loader.get(MoeRoutingFamily::descriptor(8, 2, Target::host_target(), 4));
    std::vector<int32_t> ids(6, 0), sorted(4), block(4), counts(8), total(1);
    MoeRoutingArgs a;
    a.topk_ids = TensorView::contiguous(ids.data(), DType::i32, {3, 2});
    a.sorted_ids = TensorView::contiguous(sorted.data(), DType::i32, {4});  // too small
    a.block_expert = TensorView::contiguous(block.data(), DType::i32, {4});
    a.tokens_per_expert = TensorView::contiguous(counts.data(), DType::i32, {8});
    a.total_padded = TensorView::contiguous(total.data(), DType::i32, {1});
    CHECK_THROWS_WITH_AS(launch_moe_routing(k, a, stream), doctest::Contains("need sorted_ids of >="), InvalidArgument);
    a.topk_ids.location = Location::device;
    CHECK_THROWS_WITH_AS(launch_moe_routing(k, a, stream), doctest::Contains("host tensor"), InvalidArgument);
    const LoadedKernel& g = loader.get(DequantGemvFamily::descriptor(1, 8, 32, Target::host_target()));
    CHECK_THROWS_WITH_AS(launch_moe_routing(g, a, stream), doctest::Contains("is not a loaded host-target"),
                         InvalidArgument);
}

TEST_CASE("dequant_gemv host kernel matches the reference") {
    HostKernelLoader loader;
    runtime::HostStream stream;
    const GemvCase cases[] = {
        {1, 1, 1, 32},     {1, 1, 7, 96},      {2, 2, 33, 64},     {3, 2, 65, 160},  {4, 4, 128, 512},
        {8, 5, 257, 1056}, {16, 16, 64, 256},  {16, 9, 301, 4128}, {1, 1, 2048, 7168},
    };
    uint64_t seed = 100;
    for (const auto& c : cases) check_gemv(loader, stream, c, seed++);
}

TEST_CASE("second run loads host objects from SQLite without clang") {
    cache::test::TempDir dir;
    cache::Store store(cache::test::options_in(dir));
    const KernelDescriptor kd[] = {
        DequantGemvFamily::descriptor(2, 96, 224, Target::host_target()),
        MoeRoutingFamily::descriptor(12, 3, Target::host_target(), 8),
    };
    cache::ContentKey keys[2];
    double front_and_o3_ms[2] = {};
    {
        HostKernelLoader cold({&store});
        uint64_t before = HostCompiler::clang_invocations();
        for (int i = 0; i < 2; ++i) {
            const LoadedKernel& k = cold.get(kd[i]);
            keys[i] = k.key;
            CHECK(!cold.stats(k).cache_hit);
            CHECK(cold.stats(k).frontend_ms > 0);
            front_and_o3_ms[i] = cold.stats(k).frontend_ms + cold.stats(k).optimize_ms;
        }
        CHECK(HostCompiler::clang_invocations() == before + 2);
        CHECK(cold.object_cache()->stored() == 2);
    }
    // The rows: host objects under this machine's target name, keyed by content.
    const std::string target = HostTarget::detect().name();
    for (int i = 0; i < 2; ++i) {
        const auto& key = keys[i];
        auto a = store.get(key, cache::ArtifactKind::host_object);
        REQUIRE(a);
        CHECK(a->info.target == target);
        CHECK(a->info.kind == cache::ArtifactKind::host_object);
        CHECK(a->info.compiler == "llvm-" + HostCompiler::llvm_version());
        CHECK(a->blob.size() > 0);
        CHECK(a->info.compile_ms > front_and_o3_ms[i]);  // clang + O3 + codegen
    }
    // A new loader (a new process, as far as the cache is concerned): no clang, objects from SQLite.
    HostKernelLoader warm({&store});
    uint64_t before = HostCompiler::clang_invocations();
    runtime::HostStream stream;
    check_gemv(warm, stream, {2, 2, 96, 224}, 7);
    check_routing(warm, stream, {50, 12, 3, 8, 0.1, 0}, 8);
    CHECK(HostCompiler::clang_invocations() == before);
    CHECK(warm.object_cache()->loads() == 2);
    for (const auto& d : kd) {
        const LoadedKernel& k = warm.get(d);
        CHECK(warm.stats(k).cache_hit);
        CHECK(warm.stats(k).frontend_ms == 0);
        CHECK(warm.stats(k).load_ms > 0);
    }
    // build() on a cached descriptor is a hit as well.
    auto b = warm.build(kd[0]);
    CHECK(b.stats.cache_hit);
    CHECK(b.key == keys[0]);
    CHECK(b.target == target);
    CHECK(HostCompiler::clang_invocations() == before);
}

TEST_CASE("a host object built for CPU features this machine lacks is never loaded") {
    HostTarget here = HostTarget::detect();
    // The same CPU name with every feature on: the object may use instructions this CPU lacks.
    HostTarget richer = here;
    bool lacks_something = false;
    for (auto& f : richer.features)
        if (f[0] == '-') {
            f[0] = '+';
            lacks_something = true;
        }
    REQUIRE(lacks_something);  // no real CPU has every LLVM x86 feature
    REQUIRE(!richer.runs_on(here));
    REQUIRE(richer.name() == here.name());  // same target name: only the features tell them apart

    cache::test::TempDir dir;
    cache::Store store(cache::test::options_in(dir));
    const KernelDescriptor d = DequantGemvFamily::descriptor(1, 64, 128, Target::host_target());

    // Built by a compiler for the richer CPU (as a cache from another machine would be).
    HostKernelLoader foreign({&store, nullptr, nullptr, richer});
    CHECK(!foreign.compiler().native());
    CHECK_THROWS_WITH_AS(foreign.get(d), doctest::Contains("cannot load code"), HostCompileError);
    HostBuildResult fb = foreign.build(d);
    CHECK(!fb.stats.cache_hit);
    REQUIRE(store.get(fb.key, cache::ArtifactKind::host_object));

    // This machine: a different key, so a compile, never the foreign object.
    HostKernelLoader native({&store});
    uint64_t before = HostCompiler::clang_invocations();
    runtime::HostStream stream;
    check_gemv(native, stream, {1, 1, 64, 128}, 11);
    const LoadedKernel& k = native.get(d);
    CHECK(k.key != fb.key);
    CHECK(!native.stats(k).cache_hit);
    CHECK(HostCompiler::clang_invocations() == before + 1);
    CHECK(native.object_cache()->loads() == 0);

    // A row under this machine's own key that names another target is refused, not loaded.
    cache::test::TempDir dir2;
    cache::Store store2(cache::test::options_in(dir2));
    HostKernelLoader probe({&store2});
    HostKernelSource src = probe.source(MoeRoutingFamily::descriptor(16, 4, Target::host_target()));
    cache::Artifact bad;
    bad.info = src.columns;
    bad.info.key = probe.compiler().key(src);
    bad.info.kind = cache::ArtifactKind::host_object;
    bad.info.target = "host-" + here.triple + "-sapphirerapids";
    bad.info.compiler = "llvm-" + HostCompiler::llvm_version();
    bad.blob = store.get(fb.key, cache::ArtifactKind::host_object)->blob;  // real object code, wrong CPU
    REQUIRE(store2.put(bad));
    before = HostCompiler::clang_invocations();
    check_routing(probe, stream, {40, 16, 4, 64, 0.0, 0}, 12);
    CHECK(HostCompiler::clang_invocations() == before + 1);
    CHECK(probe.object_cache()->refused() >= 1);  // asked before and after the lease, and by LLVM's hook
    CHECK(probe.object_cache()->loads() == 0);
}

TEST_CASE("the dispatcher serves host descriptors through the host loader, without a GPU") {
    cache::test::TempDir dir;
    cache::Store store(cache::test::options_in(dir));
    DispatcherOptions o;
    o.store = &store;
    Dispatcher disp(o);
    const KernelDescriptor d = DequantGemvFamily::descriptor(4, 40, 96, Target::host_target());
    BuildResult b = disp.build(d);
    CHECK(!b.cache_hit);
    CHECK(b.target == HostTarget::detect().name());
    CHECK(b.compiler == "llvm-" + HostCompiler::llvm_version());
    CHECK(b.kernel_name == "kiln_dequant_gemv_int4_g32");
    CHECK(b.bytes > 0);
    BuildResult again = disp.build(d);
    CHECK(again.cache_hit);
    CHECK(again.key == b.key);
    CHECK(again.layer == "user");
    CHECK(again.compile_ms > 0);

    uint64_t before = HostCompiler::clang_invocations();
    const LoadedKernel& k = disp.get(d);  // from the store: built above
    CHECK(HostCompiler::clang_invocations() == before);
    CHECK(k.key == b.key);
    CHECK(&disp.get(d) == &k);
    // Non-canonical spellings of the same kernel share it.
    KernelDescriptor loose = d;
    loose.config.warps = 4;  // host kernels have no warps: canonicalised away
    CHECK(&disp.get(loose) == &k);

    runtime::HostStream stream;
    std::vector<uint16_t> x(3 * 96), y(3 * 40 + 40, 0x7fc1), scale(40 * 3);
    std::vector<int32_t> packed(40 * 12);
    std::mt19937 rng(5);
    for (auto& v : x) v = runtime::float_to_bf16(std::uniform_real_distribution<float>(-1, 1)(rng));
    for (auto& v : scale) v = runtime::float_to_bf16(0.01f + 0.001f * static_cast<float>(rng() % 10));
    for (auto& w : packed) w = static_cast<int32_t>(rng());
    DequantGemvArgs a;
    a.x = TensorView::contiguous(x.data(), DType::bf16, {3, 96});
    a.weight_packed = TensorView::contiguous(packed.data(), DType::i32, {40, 12});
    a.weight_scale = TensorView::contiguous(scale.data(), DType::bf16, {40, 3});
    a.y = TensorView::contiguous(y.data(), DType::bf16, {3, 40});
    launch_dequant_gemv(k, a, stream);
    stream.synchronize();
    auto ref = dequant_gemv_reference(x, 3, packed, scale, 40, 96);
    for (size_t i = 0; i < ref.size(); ++i)
        CHECK(runtime::bf16_to_float(y[i]) == doctest::Approx(ref[i]).epsilon(1e-2).scale(1e-3));
    for (size_t i = ref.size(); i < y.size(); ++i) CHECK(y[i] == 0x7fc1);
}
