#include "jit/jit_bench.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "common/moe_routing_params.h"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/nvrtc.hpp"
#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/stream.hpp"
#include "runtime/error.hpp"
#include "runtime/temp_dir.hpp"

namespace kiln::jit {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Host time per launch: bare cuLaunchKernelEx vs Dispatcher::get + the typed launch helper, in
// interleaved batches (the stream is drained between batches, outside the timed region).
JitDispatchNumbers bench_dispatch(runtime::CudaBackend& backend, Dispatcher& disp, const KernelDescriptor& desc,
                                  int iters) {
    runtime::CudaStream stream(backend);
    const int tokens = 4;
    const auto c = desc.config.as<MoeRoutingConfig>();
    const int experts = desc.experts, topk = desc.topk, bm = c.block_m;
    std::mt19937 rng(7);
    std::vector<int32_t> ids(tokens * topk);
    for (auto& v : ids) v = static_cast<int32_t>(rng() % experts);
    int64_t cap = moe_routing_capacity(tokens, topk, experts, bm);
    runtime::Buffer d_ids = runtime::upload_buffer(backend, ids.data(), ids.size() * 4);
    runtime::Buffer d_sorted = backend.alloc(cap * 4), d_blocks = backend.alloc(cap / bm * 4),
                    d_counts = backend.alloc(experts * 4), d_total = backend.alloc(4);
    MoeRoutingArgs args{d_ids.view(runtime::DType::i32, {tokens, topk}), d_sorted.view(runtime::DType::i32, {cap}),
                        d_blocks.view(runtime::DType::i32, {cap / bm}),
                        d_counts.view(runtime::DType::i32, {experts}), d_total.view(runtime::DType::i32, {1})};

    const LoadedKernel& k = disp.get(desc);
    // The bare launch: a prebuilt config and argument array, one driver call.
    kiln_params::MoeRoutingParams p{};
    p.topk_ids = args.topk_ids.ptr<const int32_t>();
    p.sorted_ids = args.sorted_ids.ptr<int32_t>();
    p.block_expert = args.block_expert.ptr<int32_t>();
    p.tokens_per_expert = args.tokens_per_expert.ptr<int32_t>();
    p.total_padded = args.total_padded.ptr<int32_t>();
    p.num_tokens = tokens;
    p.sorted_capacity = static_cast<int32_t>(cap);
    p.max_blocks = static_cast<int32_t>(cap / bm);
    void* raw_args[] = {&p};
    CUlaunchConfig cfg{};
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = c.warps * 32u;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = k.dynamic_smem;
    cfg.hStream = stream.handle();
    const runtime::DriverApi& drv = runtime::driver();
    auto fn = reinterpret_cast<CUfunction>(k.kernel.handle());

    const int batch = 100;
    const int batches = std::max(10, iters / batch);
    // Warm up both paths.
    for (int i = 0; i < batch; ++i) {
        runtime::cu_check(drv.cuLaunchKernelEx(&cfg, fn, raw_args, nullptr), "cuLaunchKernelEx");
        launch_moe_routing(disp.get(desc), stream, args);
    }
    stream.synchronize();
    std::vector<double> bare, dispatched;
    for (int b = 0; b < batches; ++b) {
        auto t0 = Clock::now();
        for (int i = 0; i < batch; ++i)
            runtime::cu_check(drv.cuLaunchKernelEx(&cfg, fn, raw_args, nullptr), "cuLaunchKernelEx");
        bare.push_back(ms_since(t0) * 1000.0 / batch);
        stream.synchronize();
        t0 = Clock::now();
        for (int i = 0; i < batch; ++i) launch_moe_routing(disp.get(desc), stream, args);
        dispatched.push_back(ms_since(t0) * 1000.0 / batch);
        stream.synchronize();
    }
    JitDispatchNumbers r;
    r.bare_us = median(bare);
    r.dispatched_us = median(dispatched);
    r.overhead_us = r.dispatched_us - r.bare_us;

    const int lookups = 1000000;
    const LoadedKernel* sink = nullptr;
    auto t0 = Clock::now();
    for (int i = 0; i < lookups; ++i) {
        sink = &disp.get(desc);
        asm volatile("" : : "r"(sink) : "memory");
    }
    r.lookup_ns = ms_since(t0) * 1e6 / lookups;
    return r;
}

}  // namespace

JitBenchResult run_jit_bench(const JitBenchOptions& o) {
    const bool gpu = runtime::has_device();
    Target target = gpu ? parse_target(runtime::device_props(0).target()) : Target::sm(90, 'a');
    std::string device_name = gpu ? runtime::device_props(0).name : "none";

    std::vector<JitBenchKernel> rows = {
        {"moe_routing e=384 topk=8 bm=64", MoeRoutingFamily::descriptor(384, 8, target, 64)},
        {"moe_routing e=112 topk=16 bm=8", MoeRoutingFamily::descriptor(112, 16, target, 8)},
        {"dequant_gemv m=1 n=4096 k=7168", DequantGemvFamily::descriptor(1, 4096, 7168, target)},
        {"dequant_gemv m=8 n=7168 k=2048", DequantGemvFamily::descriptor(8, 7168, 2048, target)},
    };

    // Keep the primary context alive (and current) across the dispatchers created below.
    std::unique_ptr<runtime::CudaBackend> backend;
    if (gpu) backend = std::make_unique<runtime::CudaBackend>(0);

    TempDir dir("kiln-bench-jit");
    cache::StoreOptions so;
    so.cache_dir = dir.path().string();

    // First NVRTC use: loading the library and one throwaway compile (not a cache entry).
    auto t0 = Clock::now();
    Nvrtc& nvrtc = Nvrtc::instance();
    double nvrtc_load_ms = ms_since(t0);
    t0 = Clock::now();
    {
        Dispatcher warmup;
        warmup.build(MoeRoutingFamily::descriptor(4, 1, target, 8, 1));
    }
    double first_compile_ms = ms_since(t0);

    {
        cache::Store store(so);
        DispatcherOptions dopt;
        dopt.store = &store;
        Dispatcher cold(dopt);
        for (JitBenchKernel& r : rows) {
            t0 = Clock::now();
            if (gpu) {
                const LoadedKernel& k = cold.get(r.desc);
                Dispatcher::LoadTiming t = cold.timing(k);
                r.compile_ms = t.compile_ms;
                r.cold_load_ms = t.load_ms;
            } else {
                r.compile_ms = cold.build(r.desc).compile_ms;
            }
            r.cold_total_ms = ms_since(t0);
        }
    }
    // Warm: a fresh dispatcher (empty in-process map) finds every kernel in the SQLite cache.
    for (JitBenchKernel& r : rows) {
        std::vector<double> fetch, load;
        for (int rep = 0; rep < o.reps; ++rep) {
            cache::Store store(so);
            DispatcherOptions dopt;
            dopt.store = &store;
            Dispatcher warm(dopt);
            if (gpu) {
                Dispatcher::LoadTiming t = warm.timing(warm.get(r.desc));
                fetch.push_back(t.fetch_ms);
                load.push_back(t.load_ms);
            } else {
                auto t1 = Clock::now();
                warm.build(r.desc);
                fetch.push_back(ms_since(t1));
            }
        }
        r.warm_fetch_ms = median(fetch);
        r.warm_load_ms = median(load);
    }

    JitDispatchNumbers dn;
    std::string dispatch_note;
    if (gpu) {
        cache::Store store(so);
        DispatcherOptions dopt;
        dopt.store = &store;
        Dispatcher disp(dopt);
        dn = bench_dispatch(*backend, disp, MoeRoutingFamily::descriptor(64, 8, target, 16, 4), o.iters);
    } else {
        dispatch_note = runtime::driver_status().reason;
    }

    JitBenchResult out;
    out.gpu = gpu;
    out.device_name = device_name;
    out.target = target;
    out.nvrtc = nvrtc.identity();
    out.nvrtc_load_ms = nvrtc_load_ms;
    out.first_compile_ms = first_compile_ms;
    out.kernels = std::move(rows);
    out.dispatch = dn;
    out.dispatch_skipped = dispatch_note;
    return out;
}

}  // namespace kiln::jit
