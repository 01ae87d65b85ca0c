#include "model/bench/host_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <span>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autotune/heuristics/moe_w4a16.hpp"
#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "jit/host_compiler.hpp"
#include "jit/host_kernel_loader.hpp"
#include "model/layers/moe_w4a16.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/bf16.hpp"
#include "runtime/cpu_time.hpp"
#include "runtime/error.hpp"
#include "runtime/host/stream.hpp"
#include "runtime/temp_dir.hpp"

namespace kiln::model::bench {

namespace {

using namespace kiln::jit;
namespace moe = kiln::model::weights;
using MoeActivation = jit::moe::Activation;

using Clock = std::chrono::steady_clock;
using runtime::DType;
using runtime::TensorView;

// Medians over at least 3 runs and about `min_seconds`: wall-clock milliseconds, and CPU
// milliseconds of the whole process (for single-threaded work: its cost, however busy the machine).
struct Timing {
    double wall_ms = 0, cpu_ms = 0;
};
Timing measure(const std::function<void()>& fn, double min_seconds) {
    fn();  // warm-up: page faults, caches, lazy allocations
    std::vector<double> wall, cpu;
    auto start = Clock::now();
    while (wall.size() < 3 ||
           (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds && wall.size() < 2000)) {
        const double c0 = process_cpu_seconds() * 1e3;
        auto t0 = Clock::now();
        fn();
        wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        cpu.push_back(process_cpu_seconds() * 1e3 - c0);
    }
    auto median = [](std::vector<double>& v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
    };
    return {median(wall), median(cpu)};
}

// Runs a host kernel on the calling thread with a one-thread pool: the kernel alone, no stream.
struct DirectRunner {
    runtime::HostThreadPool pool{1};
    std::vector<unsigned char> scratch;
    void operator()(const LoadedKernel& k, const void* args) {
        if (scratch.size() < k.host_scratch_bytes) scratch.resize(k.host_scratch_bytes + 64);
        int32_t status = 0;
        kiln_host_ctx ctx = pool.abi_context();
        ctx.status = &status;
        auto p = reinterpret_cast<uintptr_t>(scratch.data());
        ctx.scratch = k.host_scratch_bytes ? reinterpret_cast<void*>((p + 63) / 64 * 64) : nullptr;
        ctx.scratch_bytes = k.host_scratch_bytes;
        k.host_entry(&ctx, args);
        if (status != 0) throw Error(fmt::format("kiln bench host: kernel {} refused to run ({})", to_string(k.desc), status));
    }
};

// The same computation as dequant_gemv_reference in fp32 with the shape known only at run time:
// what a straightforward C++ implementation compiled into kiln (generic x86-64) does.
void plain_fp32_gemv(const uint16_t* x, int m, const int32_t* packed, const uint16_t* scale, int n, int k, uint16_t* y) {
    for (int row = 0; row < n; ++row)
        for (int r = 0; r < m; ++r) {
            float acc = 0.f;
            for (int kk = 0; kk < k; ++kk) {
                const uint32_t word = static_cast<uint32_t>(packed[static_cast<size_t>(row) * (k / 8) + kk / 8]);
                const int code = static_cast<int>((word >> (4 * (kk % 8))) & 0xfu);
                const float w = static_cast<float>(code - 8) * runtime::bf16_to_float(scale[static_cast<size_t>(row) * (k / 32) + kk / 32]);
                acc += w * runtime::bf16_to_float(x[static_cast<size_t>(r) * k + kk]);
            }
            y[static_cast<size_t>(r) * n + row] = runtime::float_to_bf16(acc);
        }
}

// A routed-expert layer on the host: MXFP4 weights repacked for the kernels, and the plain fp32 form a
// straightforward implementation keeps (weights dequantised once at load, scalar loops at run time).
struct HostMoeLayer {
    static constexpr int k_experts = 8, k_topk = 2, k_hidden = 2048, k_inter = 1024, k_tiles = 1;
    moe::PreparedMoeWeights gu, dn;
    std::vector<float> w_gu, w_dn;  // [e][2I][H] (gate rows, then up rows), [e][H][I]
    // The kernels the layer's decode configuration runs (compiled first, for the compile table).
    static std::vector<KernelDescriptor> descriptors(const moe::PreparedMoeWeights& gu, const moe::PreparedMoeWeights& dn,
                                                     Target t) {
        return {MoeW4A16RouteFamily::descriptor(k_experts, 8 * k_tiles, t),
                MoeW4A16DecodeFamily::descriptor(jit::moe::Matrix::gate_up, layers::matrix_shape(gu),
                                                 MoeActivation::situ_glu, 8 * k_tiles, t),
                MoeW4A16DecodeFamily::descriptor(jit::moe::Matrix::down, layers::matrix_shape(dn),
                                                 MoeActivation::situ_glu, 8 * k_tiles, t)};
    }

    explicit HostMoeLayer(std::mt19937_64& rng) {
        std::vector<std::vector<std::byte>> packed(3 * k_experts), scale(3 * k_experts);
        auto fill = [&](int idx, int n, int k) {
            packed[idx].resize(static_cast<size_t>(n) * k / 2);
            for (auto& b : packed[idx]) b = std::byte(rng());
            scale[idx].resize(static_cast<size_t>(n) * k / 32);
            for (auto& b : scale[idx]) b = std::byte(117 + rng() % 5);
        };
        for (int e = 0; e < k_experts; ++e) {
            fill(3 * e, k_inter, k_hidden);
            fill(3 * e + 1, k_inter, k_hidden);
            fill(3 * e + 2, k_hidden, k_inter);
        }
        const auto fmt4 = moe::W4Format::mxfp4_g32_e8m0;
        gu = moe::prepare_moe_weights(fmt4, moe::W4Layout::decode_mma16, true, k_experts, k_inter, k_hidden,
                                      [&](int e, int part) { return moe::CheckpointMatrix{packed[3 * e + part], scale[3 * e + part]}; });
        dn = moe::prepare_moe_weights(fmt4, moe::W4Layout::decode_mma16, false, k_experts, k_hidden, k_inter,
                                      [&](int e, int) { return moe::CheckpointMatrix{packed[3 * e + 2], scale[3 * e + 2]}; });
        const size_t per_gu = size_t(2) * k_inter * k_hidden, per_dn = size_t(k_hidden) * k_inter;
        w_gu.resize(per_gu * k_experts);
        w_dn.resize(per_dn * k_experts);
        for (int e = 0; e < k_experts; ++e) {
            moe::dequantize_prepared(gu, e, std::span<float>(w_gu.data() + per_gu * e, per_gu));
            moe::dequantize_prepared(dn, e, std::span<float>(w_dn.data() + per_dn * e, per_dn));
        }
    }

    layers::MoeW4A16Shape shape(int max_tokens) const {
        layers::MoeW4A16Shape s;
        s.act = MoeActivation::situ_glu;
        s.topk = k_topk;
        s.max_tokens = max_tokens;
        return s;
    }
    // The decode path with fp32 atomics, every call.
    static autotune::MoeW4A16Tuning tuning() {
        autotune::MoeW4A16Tuning t = autotune::default_moe_w4a16_tuning(moe::W4Format::mxfp4_g32_e8m0);
        t.tiles = k_tiles;
        t.rows_combine_min = -1;
        t.prefill_min = -1;
        return t;
    }

    // The plain implementation: per token and slot, h = SiTU-GLU(Wg x, Wu x), out += w * Wd h.
    void plain(const std::vector<uint16_t>& x, const std::vector<int32_t>& ids, const std::vector<float>& wts,
               int tokens, std::vector<float>& out) const {
        std::vector<float> xf(k_hidden), h(k_inter), o(k_hidden);
        for (int t = 0; t < tokens; ++t) {
            for (int k = 0; k < k_hidden; ++k) xf[k] = runtime::bf16_to_float(x[size_t(t) * k_hidden + k]);
            std::fill(o.begin(), o.end(), 0.f);
            for (int j = 0; j < k_topk; ++j) {
                const int e = ids[size_t(t) * k_topk + j];
                if (e < 0 || e >= k_experts) continue;
                const float* wg = w_gu.data() + size_t(e) * 2 * k_inter * k_hidden;
                const float* wu = wg + size_t(k_inter) * k_hidden;
                for (int i = 0; i < k_inter; ++i) {
                    float g = 0.f, u = 0.f;
                    for (int k = 0; k < k_hidden; ++k) {
                        g += wg[size_t(i) * k_hidden + k] * xf[k];
                        u += wu[size_t(i) * k_hidden + k] * xf[k];
                    }
                    h[i] = runtime::bf16_to_float(runtime::float_to_bf16(
                        4.f * std::tanh(g / 4.f) / (1.f + std::exp(-g)) * (25.f * std::tanh(u / 25.f))));
                }
                const float* wd = w_dn.data() + size_t(e) * k_hidden * k_inter;
                for (int n = 0; n < k_hidden; ++n) {
                    float a = 0.f;
                    for (int i = 0; i < k_inter; ++i) a += wd[size_t(n) * k_inter + i] * h[i];
                    o[n] += wts[size_t(t) * k_topk + j] * a;
                }
            }
            std::copy(o.begin(), o.end(), out.begin() + size_t(t) * k_hidden);
        }
    }
};

}  // namespace

HostBenchResult run_host_bench(const HostBenchOptions& o) {
    TempDir tmp("kiln-bench-host");
    cache::StoreOptions so;
    so.cache_dir = o.cache_dir.empty() ? (tmp.path() / "cache").string() : o.cache_dir;
    cache::Store store(so);

    const Target host = Target::host_target();
    std::mt19937_64 rng(42);
    HostMoeLayer moe_layer(rng);
    std::vector<KernelDescriptor> kernels = {
        MoeRoutingFamily::descriptor(896, 16, host, 16),      // K3: 896 experts, top-16
        MoeRoutingFamily::descriptor(384, 8, host, 64),       // K2: 384 experts, top-8
        DequantGemvFamily::descriptor(1, 2048, 7168, host),   // K2 expert gate/up rows, decode
        DequantGemvFamily::descriptor(1, 7168, 2048, host),   // K2 expert down, decode
        DequantGemvFamily::descriptor(8, 3584, 7168, host),   // K3 latent down-projection, batch 8
        DequantGemvFamily::descriptor(16, 4096, 4096, host),  // square, batch 16
    };
    const size_t first_moe = kernels.size();
    for (const auto& d : HostMoeLayer::descriptors(moe_layer.gu, moe_layer.dn, host)) kernels.push_back(d);

    // 1. Cold compiles, then warm loads by a second loader on the same store.
    std::vector<HostBenchCompile> compile_rows;
    const uint64_t clang_before = HostCompiler::clang_invocations();
    std::string target_name;
    {
        HostKernelLoader cold({&store});
        target_name = cold.compiler().target().name();
        for (const auto& d : kernels) {
            const double c0 = process_cpu_seconds() * 1e3;
            const LoadedKernel& k = cold.get(d);
            compile_rows.push_back({to_string(k.desc), cold.stats(k), {}, process_cpu_seconds() * 1e3 - c0});
        }
    }
    const uint64_t clang_cold = HostCompiler::clang_invocations() - clang_before;
    HostKernelLoader loader({&store});
    for (size_t i = 0; i < kernels.size(); ++i) compile_rows[i].warm = loader.stats(loader.get(kernels[i]));
    const uint64_t clang_warm = HostCompiler::clang_invocations() - clang_before - clang_cold;

    // 2. Speed against the references.
    runtime::HostBackend backend;  // the process pool (KILN_HOST_THREADS)
    auto stream_owner = backend.create_stream();
    runtime::Stream& stream = *stream_owner;
    DirectRunner direct;
    std::vector<HostBenchSpeed> speed;

    {
        const KernelDescriptor& d = kernels[0];
        const LoadedKernel& k = loader.get(d);
        for (int tokens : {1, 64, 4096}) {
            std::uniform_int_distribution<int> pick(0, d.experts - 1);
            std::vector<int32_t> ids(static_cast<size_t>(tokens) * d.topk);
            for (auto& id : ids) id = pick(rng);
            const int bm = d.config.as<MoeRoutingConfig>().block_m;
            const int64_t cap = moe_routing_capacity(tokens, d.topk, d.experts, bm);
            const int64_t blocks = cap / bm;
            std::vector<int32_t> sorted(cap), block(blocks), counts(d.experts), total(1);
            MoeRoutingArgs a;
            a.topk_ids = TensorView::contiguous(ids.data(), DType::i32, {tokens, d.topk});
            a.sorted_ids = TensorView::contiguous(sorted.data(), DType::i32, {cap});
            a.block_expert = TensorView::contiguous(block.data(), DType::i32, {blocks});
            a.tokens_per_expert = TensorView::contiguous(counts.data(), DType::i32, {d.experts});
            a.total_padded = TensorView::contiguous(total.data(), DType::i32, {1});
            const kiln_params::MoeRoutingParams packed = moe_routing_params(k, a, runtime::Location::host);
            HostBenchSpeed r;
            r.kernel = fmt::format("moe_routing e={} topk={} bm={}", d.experts, d.topk, bm);
            r.shape = fmt::format("tokens={}", tokens);
            r.reference_ms = measure([&] {
                auto ref = moe_routing_reference(ids, tokens, d.topk, d.experts, bm, cap, blocks);
                if (ref.total_padded < 0) throw Error("unreachable");
            }, o.min_seconds).cpu_ms;
            r.jit_ms = measure([&] { direct(k, &packed); }, o.min_seconds).cpu_ms;
            r.launch_ms = measure([&] { launch_moe_routing(k, stream, a); stream.synchronize(); }, o.min_seconds).wall_ms;
            auto ref = moe_routing_reference(ids, tokens, d.topk, d.experts, bm, cap, blocks);
            if (ref.sorted_ids != sorted || ref.block_expert != block)
                throw Error("kiln bench host: moe_routing result differs from the reference");
            r.bytes = static_cast<double>(ids.size() * 4 + (cap + blocks) * 4);
            speed.push_back(r);
        }
    }
    for (size_t i = 2; i < first_moe; ++i) {
        const KernelDescriptor& d = kernels[i];
        const LoadedKernel& k = loader.get(d);
        const int m = d.m, n = d.n, kk = d.k;
        std::uniform_real_distribution<float> xd(-2.f, 2.f), sd(0.002f, 0.05f);
        std::vector<uint16_t> x(static_cast<size_t>(m) * kk), scale(static_cast<size_t>(n) * (kk / 32));
        std::vector<int32_t> packed(static_cast<size_t>(n) * (kk / 8));
        for (auto& v : x) v = runtime::float_to_bf16(xd(rng));
        for (auto& v : scale) v = runtime::float_to_bf16(sd(rng));
        for (auto& w : packed) w = static_cast<int32_t>(static_cast<uint32_t>(rng()));
        std::vector<uint16_t> y(static_cast<size_t>(m) * n), yp(y.size());
        DequantGemvArgs a;
        a.x = TensorView::contiguous(x.data(), DType::bf16, {m, kk});
        a.weight_packed = TensorView::contiguous(packed.data(), DType::i32, {n, kk / 8});
        a.weight_scale = TensorView::contiguous(scale.data(), DType::bf16, {n, kk / 32});
        a.y = TensorView::contiguous(y.data(), DType::bf16, {m, n});
        const kiln_params::DequantGemvParams hargs = dequant_gemv_params(k, a, runtime::Location::host);
        HostBenchSpeed r;
        r.kernel = fmt::format("dequant_gemv n={} k={}", n, kk);
        r.shape = fmt::format("m={}", m);
        std::vector<double> ref;
        r.reference_ms = measure([&] { ref = dequant_gemv_reference(x, m, packed, scale, n, kk); }, o.min_seconds).cpu_ms;
        r.plain_ms = measure([&] { plain_fp32_gemv(x.data(), m, packed.data(), scale.data(), n, kk, yp.data()); },
                             o.min_seconds).cpu_ms;
        r.jit_ms = measure([&] { direct(k, &hargs); }, o.min_seconds).cpu_ms;
        r.launch_ms = measure([&] { launch_dequant_gemv(k, stream, a); stream.synchronize(); }, o.min_seconds).wall_ms;
        double worst = 0;
        for (size_t j = 0; j < y.size(); ++j) {
            const double got = runtime::bf16_to_float(y[j]);
            worst = std::max(worst, std::fabs(got - ref[j]) / (std::fabs(ref[j]) + 1e-3));
        }
        if (!(worst < 0.05)) throw Error(fmt::format("kiln bench host: dequant_gemv differs from the reference ({})", worst));
        r.bytes = static_cast<double>(packed.size() * 4 + scale.size() * 2 + x.size() * 2 + y.size() * 2);
        speed.push_back(r);
    }

    {
        HostMoeLayer& L = moe_layer;
        constexpr int H = HostMoeLayer::k_hidden, K = HostMoeLayer::k_topk, E = HostMoeLayer::k_experts;
        jit::DispatcherOptions dopt;
        dopt.store = &store;
        jit::Dispatcher disp(dopt);
        runtime::HostThreadPool pool1(1);
        runtime::HostBackend one_backend(pool1);  // the JIT column: one thread
        auto one_owner = one_backend.create_stream();
        runtime::Stream& one = *one_owner;
        // The layer reads the weights where a run names them: host memory here.
        layers::MoeW4A16 layer(disp, backend, L.gu, L.dn, L.shape(64), HostMoeLayer::tuning());
        layers::MoeW4A16 layer1(disp, one_backend, L.gu, L.dn, L.shape(64), HostMoeLayer::tuning());
        for (int tokens : {1, 8, 64}) {
            std::normal_distribution<float> nd(0.f, 1.f);
            std::vector<uint16_t> x(size_t(tokens) * H), out(size_t(tokens) * H);
            for (auto& v : x) v = runtime::float_to_bf16(nd(rng));
            std::vector<int32_t> ids(size_t(tokens) * K);
            std::vector<float> wts(ids.size());
            std::uniform_real_distribution<float> wd(0.05f, 1.f);
            for (int t = 0; t < tokens; ++t) {
                const int first = static_cast<int>(rng() % E);
                ids[size_t(t) * K] = first;
                ids[size_t(t) * K + 1] = (first + 1 + static_cast<int>(rng() % (E - 1))) % E;
                wts[size_t(t) * K] = wd(rng);
                wts[size_t(t) * K + 1] = wd(rng);
            }
            std::vector<float> ref(out.size());
            HostBenchSpeed r;
            r.kernel = fmt::format("moe_w4a16 mxfp4 H={} I={} {}x{}", H, HostMoeLayer::k_inter, E, K);
            r.shape = fmt::format("tokens={}", tokens);
            r.reference_ms = measure([&] { L.plain(x, ids, wts, tokens, ref); }, o.min_seconds).cpu_ms;
            layers::MoeW4A16Tensors t;
            t.gate_up = reinterpret_cast<uint64_t>(L.gu.bytes.data());
            t.down = reinterpret_cast<uint64_t>(L.dn.bytes.data());
            t.x = TensorView::contiguous(x.data(), DType::bf16, {tokens, H});
            t.topk_ids = TensorView::contiguous(ids.data(), DType::i32, {tokens, K});
            t.topk_weights = TensorView::contiguous(wts.data(), DType::f32, {tokens, K});
            t.out = TensorView::contiguous(out.data(), DType::bf16, {tokens, H});
            const layers::MoeW4A16Plan plan = layer.plan(tokens), plan1 = layer1.plan(tokens);
            r.jit_ms = measure([&] {
                layer1.run(plan1, t, one);
                one.synchronize();
            }, o.min_seconds).cpu_ms;
            r.launch_ms = measure([&] {
                layer.run(plan, t, stream);
                stream.synchronize();
            }, o.min_seconds).wall_ms;
            double num = 0, den = 0;
            for (size_t j = 0; j < out.size(); ++j) {
                const double dlt = runtime::bf16_to_float(out[j]) - ref[j];
                num += dlt * dlt;
                den += double(ref[j]) * ref[j];
            }
            if (!(std::sqrt(num / std::max(den, 1e-30)) < 2e-2))
                throw Error(fmt::format("kiln bench host: moe_w4a16 differs from the plain implementation (rel {:.3g})",
                                        std::sqrt(num / std::max(den, 1e-30))));
            std::vector<int> touched(E, 0);
            for (int id : ids) touched[id] = 1;
            const int te = std::accumulate(touched.begin(), touched.end(), 0);
            r.bytes = static_cast<double>(te) * static_cast<double>(L.gu.expert_stride + L.dn.expert_stride) +
                      4.0 * tokens * H;
            speed.push_back(r);
        }
    }

    HostBenchResult out;
    out.target = target_name;
    out.llvm = HostCompiler::llvm_version();
    out.threads = backend.pool().threads();
    out.clang_invocations_cold = clang_cold;
    out.clang_invocations_warm = clang_warm;
    out.compile = std::move(compile_rows);
    out.speed = std::move(speed);
    return out;
}

}  // namespace kiln::model::bench
