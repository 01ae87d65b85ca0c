// The host target's kernels: every family that is not device-only has a host template that compiles (a
// family with neither is refused at registration), host objects in SQLite (loaded without clang, never for a
// CPU this machine is not), the dispatcher serving host descriptors, the launches' argument checks, and the
// Stream interface's common sequence with a real host kernel. Each family's kernels against their CPU
// references are the op harness's (tests/ops, on every backend).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "jit/dispatcher.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/families/moe_w4a16_combine.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_dequant.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "jit/family.hpp"
#include "jit/host_compiler.hpp"
#include "jit/host_kernel_loader.hpp"
#include "runtime/bf16.hpp"
#include "runtime/host/stream.hpp"
#include "tests/cache/cache_test_util.hpp"
#include "tests/jit/family_samples.hpp"
#include "tests/jit/moe_routing_sequence.hpp"

using namespace kiln;
using namespace kiln::jit;
using runtime::DType;
using runtime::Location;
using runtime::TensorView;

namespace {

const Target k_host = Target::host_target();

runtime::HostBackend& host() {
    static runtime::HostBackend b;
    return b;
}

// A loaded dequant_gemv kernel computes y = x W^T (random data, a poisoned row past m left alone): the proof
// that a kernel loaded from the store runs.
void check_gemv_runs(const LoadedKernel& kern, int m, uint64_t seed) {
    const int n = kern.desc.n, k = kern.desc.k;
    CAPTURE(kern.name);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> xd(-2.f, 2.f), sd(0.002f, 0.05f);
    std::vector<uint16_t> x(size_t(m) * k), scale(size_t(n) * (k / 32));
    std::vector<int32_t> packed(size_t(n) * (k / 8));
    for (auto& v : x) v = runtime::float_to_bf16(xd(rng));
    for (auto& v : scale) v = runtime::float_to_bf16(sd(rng));
    for (auto& w : packed) w = static_cast<int32_t>(static_cast<uint32_t>(rng()));
    std::vector<uint16_t> y(size_t(m + 1) * n, 0x7fc1);  // NaN
    DequantGemvArgs a;
    a.x = TensorView::contiguous(x.data(), DType::bf16, {m, k});
    a.weight_packed = TensorView::contiguous(packed.data(), DType::i32, {n, k / 8});
    a.weight_scale = TensorView::contiguous(scale.data(), DType::bf16, {n, k / 32});
    a.y = TensorView::contiguous(y.data(), DType::bf16, {m, n});
    runtime::HostStream stream(host());
    launch_dequant_gemv(kern, stream, a);
    stream.synchronize();
    const std::vector<double> ref = dequant_gemv_reference(x, m, packed, scale, n, k);
    long bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)  // bf16 output rounding, fp32 accumulation
        bad += !(std::fabs(runtime::bf16_to_float(y[i]) - ref[i]) <= std::ldexp(std::fabs(ref[i]), -7) + 1e-3);
    CHECK(bad == 0);
    for (size_t i = ref.size(); i < y.size(); ++i) REQUIRE(y[i] == 0x7fc1);
}

// The same for a loaded moe_routing kernel, through the common sequence.
void check_routing_runs(const LoadedKernel& k, int tokens, uint64_t seed) {
    kiln::test::run_stream_sequence(host(), kiln::test::moe_routing_sequence(k, tokens, seed));
}

}  // namespace

TEST_CASE("every built-in family that is not device-only has a host template that compiles") {
    HostKernelLoader loader;
    for (const Family* f : builtin_families().list()) {
        CAPTURE(std::string(f->name()));
        const std::vector<KernelDescriptor> host = kiln::test::sample_descriptors(f->name(), k_host);
        if (f->device_only()) {
            // the host target runs the families it fuses instead: a host descriptor is refused
            CHECK(host.empty());
            KernelDescriptor d = kiln::test::sample_descriptors(f->name(), Target::sm(90, 'a')).at(0);
            d.target = k_host;
            CHECK_THROWS_AS(f->canonicalize(d), InvalidArgument);
            CHECK_THROWS_AS(loader.get(d), InvalidArgument);
            continue;
        }
        REQUIRE(f->has_host_source());
        REQUIRE_FALSE(host.empty());
        for (const KernelDescriptor& d : host) {
            CAPTURE(to_string(d));
            const LoadedKernel& k = loader.get(d);
            CHECK(static_cast<bool>(k.host_entry));
            CHECK(k.desc.target.is_host());
            CHECK(k.handle.kind == runtime::BackendKind::host);
            CHECK((k.handle.host == k.host_entry));
            CHECK(std::string(k.handle.name) == k.name);
            HostKernelSource src = loader.source(k.desc);
            int templates = 0;
            for (const auto& [name, bytes] : src.headers) {
                CHECK((name.rfind("host/", 0) == 0 || name.rfind("common/", 0) == 0));
                templates += name.rfind("host/", 0) == 0;
            }
            CHECK(templates > 0);
        }
    }
}

TEST_CASE("a family without a host template is refused at registration, unless it is device-only") {
    struct NoHost : Family {
        bool fusion = false;
        std::string_view name() const override { return fusion ? "fused_only" : "device_only"; }
        std::string_view summary() const override { return "test"; }
        std::vector<std::string> modes() const override { return {"x"}; }
        std::string_view dims() const override { return ""; }
        std::span<const ConfigField> config_fields() const override { return {}; }
        KernelDescriptor canonicalize(const KernelDescriptor& d) const override { return d; }
        DeviceSource device_source(const KernelDescriptor&) const override { return {}; }
        uint32_t max_dynamic_smem(const KernelDescriptor&) const override { return 0; }
        bool device_only() const override { return fusion; }
    };
    FamilyRegistry r;
    CHECK_THROWS_WITH_AS(r.add(std::make_unique<NoHost>()),
                         doctest::Contains("kernel family 'device_only' has no host template"), InvalidArgument);
    CHECK(r.find("device_only") == nullptr);
    auto fusion = std::make_unique<NoHost>();
    fusion->fusion = true;
    r.add(std::move(fusion));
    CHECK(r.find("fused_only") != nullptr);
    CHECK_THROWS_AS(r.get("fused_only").host_source(KernelDescriptor{}), NotFound);
    register_builtin_families(r);
    CHECK(r.list().size() == builtin_families().list().size() + 1);
}

TEST_CASE("host launches check their kernel and arguments before enqueueing anything") {
    HostKernelLoader loader;
    runtime::HostStream stream(host());
    const LoadedKernel& k = loader.get(MoeRoutingFamily::descriptor(8, 2, k_host, 4));
    std::vector<int32_t> ids(6, 0), sorted(4), block(4), counts(8), total(1);
    MoeRoutingArgs a;
    a.topk_ids = TensorView::contiguous(ids.data(), DType::i32, {3, 2});
    a.sorted_ids = TensorView::contiguous(sorted.data(), DType::i32, {4});  // too small
    a.block_expert = TensorView::contiguous(block.data(), DType::i32, {4});
    a.tokens_per_expert = TensorView::contiguous(counts.data(), DType::i32, {8});
    a.total_padded = TensorView::contiguous(total.data(), DType::i32, {1});
    CHECK_THROWS_WITH_AS(launch_moe_routing(k, stream, a), doctest::Contains("need sorted_ids of >="), InvalidArgument);
    a.topk_ids.location = Location::device;
    CHECK_THROWS_WITH_AS(launch_moe_routing(k, stream, a), doctest::Contains("host tensor"), InvalidArgument);
    const LoadedKernel& g = loader.get(DequantGemvFamily::descriptor(1, 8, 32, k_host));
    CHECK_THROWS_WITH_AS(launch_moe_routing(g, stream, a),
                         doctest::Contains("launch_moe_routing: kernel is dequant_gemv/"), InvalidArgument);
    DequantGemvArgs ga{};
    CHECK_THROWS_WITH_AS(launch_dequant_gemv(k, stream, ga), doctest::Contains("kernel is moe_routing/"),
                         InvalidArgument);

    // moe_w4a16: each launch names what does not match its kernel
    const moe::MatrixShape w{WeightFormat::int4_g32_bf16, 128, 64};
    const LoadedKernel& dq = loader.get(MoeW4A16DequantFamily::descriptor(w, k_host));
    const LoadedKernel& rt = loader.get(MoeW4A16RouteFamily::descriptor(4, 8, k_host));
    const LoadedKernel& dn =
        loader.get(MoeW4A16DecodeFamily::descriptor(moe::Matrix::down, w, moe::Activation::silu_glu, 8, k_host));
    const LoadedKernel& pf =
        loader.get(MoeW4A16PrefillFamily::descriptor(moe::Matrix::down, w, moe::Activation::silu_glu, k_host));
    const LoadedKernel& cb = loader.get(MoeW4A16CombineFamily::descriptor(k_host));
    std::vector<uint8_t> weights(64);
    std::vector<uint16_t> out(size_t(128) * 64);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_dequant(dq, stream, {weights.data(), out.data(), 128, 128}),
                         doctest::Contains("does not match kernel"), InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_dequant(rt, stream, {weights.data(), out.data(), 128, 64}),
                         doctest::Contains("kernel is moe_w4a16_route/"), InvalidArgument);
    kiln_params::moe::RoutingParams rp{};
    rp.num_experts = 5;
    rp.topk = 1;
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_route(rt, stream, rp), doctest::Contains("5 experts, kernel built for 4"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_route(dq, stream, rp), doctest::Contains("kernel is moe_w4a16_dequant/"),
                         InvalidArgument);
    kiln_params::moe::DecodeParams dp{};
    dp.n_pad = 128;
    dp.k_pad = 64;
    dp.k_real = 64;
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_decode(pf, stream, dp), doctest::Contains("kernel is moe_w4a16_prefill/"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_prefill(dn, stream, dp, 1), doctest::Contains("kernel is moe_w4a16_decode/"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_prefill(pf, stream, dp, -1), doctest::Contains("negative m-block capacity"),
                         InvalidArgument);
    dp.n_pad = 256;
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_decode(dn, stream, dp),
                         doctest::Contains("weights [256, 64] do not match kernel"), InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_prefill(pf, stream, dp, 1), doctest::Contains("do not match kernel"),
                         InvalidArgument);
    kiln_params::moe::CombineParams cp{};
    cp.num_tokens = 3;
    cp.topk = 0;
    cp.n = 64;
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_combine(cb, stream, cp), doctest::Contains("3 tokens, topk 0, 64 columns"),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_combine(dn, stream, cp), doctest::Contains("kernel is moe_w4a16_decode/"),
                         InvalidArgument);
    stream.synchronize();  // nothing was enqueued, so nothing failed
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
    check_gemv_runs(warm.get(kd[0]), 2, 7);
    check_routing_runs(warm.get(kd[1]), 50, 8);
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
    check_gemv_runs(native.get(d), 1, 11);
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
    check_routing_runs(probe.get(MoeRoutingFamily::descriptor(16, 4, Target::host_target())), 40, 12);
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
    loose.config = KernelConfig::of(DequantGemvConfig{4});  // host kernels have no warps: canonicalised away
    CHECK(&disp.get(loose) == &k);

    check_gemv_runs(k, 3, 5);
}

TEST_CASE("the Stream interface's common sequence with the host moe_routing kernel, through a dispatcher") {
    cache::test::TempDir dir;
    cache::Store store(cache::test::options_in(dir));
    DispatcherOptions o;
    o.store = &store;
    Dispatcher disp(o);
    const LoadedKernel& k = disp.get(MoeRoutingFamily::descriptor(64, 8, k_host, 16));
    for (int tokens : {1, 37, 5000})
        kiln::test::run_stream_sequence(host(), kiln::test::moe_routing_sequence(k, tokens, tokens));
}
