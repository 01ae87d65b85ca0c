// `kiln bench jit`: what the JIT costs. Numbers only; nothing here decides pass/fail.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "jit/jit_cli.hpp"
#include "jit/nvrtc.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/error.hpp"
#include "runtime/cuda/stream.hpp"

namespace kiln::jit {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
    int iters = 20000;
    int reps = 5;
    bool json = false;
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "kiln-bench-jit-XXXXXX").string();
        if (mkdtemp(tmpl.data()) == nullptr) throw IoError("cannot create a temporary cache directory");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

struct KernelRow {
    std::string label;
    KernelDescriptor desc;
    double compile_ms = 0, cold_total_ms = 0, cold_load_ms = 0;
    double warm_fetch_ms = 0, warm_load_ms = 0;
};

struct DispatchNumbers {
    double bare_us = 0, dispatched_us = 0, overhead_us = 0, lookup_ns = 0;
};

// Host time per launch: bare cuLaunchKernelEx vs Dispatcher::get + the typed launch helper, in
// interleaved batches (the stream is drained between batches, outside the timed region).
DispatchNumbers bench_dispatch(Dispatcher& disp, const KernelDescriptor& desc, int iters) {
    runtime::Stream stream;
    const int tokens = 4;
    const int experts = desc.experts, topk = desc.topk, bm = desc.config.block_m;
    std::mt19937 rng(7);
    std::vector<int32_t> ids(tokens * topk);
    for (auto& v : ids) v = static_cast<int32_t>(rng() % experts);
    int64_t cap = moe_routing_capacity(tokens, topk, experts, bm);
    runtime::DeviceBuffer d_ids = runtime::to_device(ids);
    runtime::DeviceBuffer d_sorted(cap * 4), d_blocks(cap / bm * 4), d_counts(experts * 4), d_total(4);
    MoeRoutingArgs args{d_ids.view(runtime::DType::i32, {tokens, topk}), d_sorted.view(runtime::DType::i32, {cap}),
                        d_blocks.view(runtime::DType::i32, {cap / bm}),
                        d_counts.view(runtime::DType::i32, {experts}), d_total.view(runtime::DType::i32, {1})};

    const LoadedKernel& k = disp.get(desc);
    // The bare launch: a prebuilt config and argument array, one driver call.
    const int32_t* p_ids = args.topk_ids.ptr<int32_t>();
    int32_t n_tok = tokens, capacity = static_cast<int32_t>(cap), max_blocks = static_cast<int32_t>(cap / bm);
    int32_t* p_sorted = args.sorted_ids.ptr<int32_t>();
    int32_t* p_blocks = args.block_expert.ptr<int32_t>();
    int32_t* p_counts = args.tokens_per_expert.ptr<int32_t>();
    int32_t* p_total = args.total_padded.ptr<int32_t>();
    void* raw_args[] = {&p_ids, &n_tok, &p_sorted, &capacity, &p_blocks, &max_blocks, &p_counts, &p_total};
    CUlaunchConfig cfg{};
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = desc.config.warps * 32u;
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
        launch_moe_routing(disp.get(desc), args, stream.handle());
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
        for (int i = 0; i < batch; ++i) launch_moe_routing(disp.get(desc), args, stream.handle());
        dispatched.push_back(ms_since(t0) * 1000.0 / batch);
        stream.synchronize();
    }
    DispatchNumbers r;
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

void run_bench(const BenchOptions& o) {
    const bool gpu = runtime::has_device();
    Target target = gpu ? parse_target(runtime::device_props(0).target()) : Target::sm(90, 'a');
    std::string device_name = gpu ? runtime::device_props(0).name : "none";

    std::vector<KernelRow> rows = {
        {"moe_routing e=384 topk=8 bm=64", MoeRoutingFamily::descriptor(384, 8, target, 64)},
        {"moe_routing e=112 topk=16 bm=8", MoeRoutingFamily::descriptor(112, 16, target, 8)},
        {"dequant_gemv m=1 n=4096 k=7168", DequantGemvFamily::descriptor(1, 4096, 7168, target)},
        {"dequant_gemv m=8 n=7168 k=2048", DequantGemvFamily::descriptor(8, 7168, 2048, target)},
    };

    // Keep the primary context alive (and current) across the dispatchers created below.
    std::unique_ptr<runtime::Context> ctx;
    if (gpu) ctx = std::make_unique<runtime::Context>(0);

    TempDir dir;
    cache::StoreOptions so;
    so.cache_dir = dir.path.string();

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
        for (KernelRow& r : rows) {
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
    for (KernelRow& r : rows) {
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

    DispatchNumbers dn;
    std::string dispatch_note;
    if (gpu) {
        cache::Store store(so);
        DispatcherOptions dopt;
        dopt.store = &store;
        Dispatcher disp(dopt);
        dn = bench_dispatch(disp, MoeRoutingFamily::descriptor(64, 8, target, 16, 4), o.iters);
    } else {
        dispatch_note = runtime::driver_status().reason;
    }

    if (o.json) {
        nlohmann::json j;
        j["device"] = device_name;
        j["target"] = to_string(target);
        j["nvrtc"] = nvrtc.identity();
        j["nvrtc_load_ms"] = nvrtc_load_ms;
        j["first_compile_ms"] = first_compile_ms;
        j["kernels"] = nlohmann::json::array();
        for (const KernelRow& r : rows)
            j["kernels"].push_back({{"kernel", r.label},
                                    {"descriptor", to_string(r.desc)},
                                    {"nvrtc_ms", r.compile_ms},
                                    {"cold_load_ms", gpu ? nlohmann::json(r.cold_load_ms) : nlohmann::json()},
                                    {"cold_total_ms", r.cold_total_ms},
                                    {"warm_fetch_ms", r.warm_fetch_ms},
                                    {"warm_load_ms", gpu ? nlohmann::json(r.warm_load_ms) : nlohmann::json()},
                                    {"warm_total_ms", r.warm_fetch_ms + r.warm_load_ms}});
        if (gpu)
            j["dispatch"] = {{"bare_launch_us", dn.bare_us},
                             {"dispatched_launch_us", dn.dispatched_us},
                             {"overhead_us", dn.overhead_us},
                             {"lookup_ns", dn.lookup_ns}};
        else
            j["dispatch"] = {{"skipped", dispatch_note}};
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("kiln bench jit: device {}, target {}, {} (loaded in {:.1f} ms; first compile {:.1f} ms)\n",
               device_name, to_string(target), nvrtc.identity(), nvrtc_load_ms, first_compile_ms);
    if (gpu)
        fmt::print("dispatch: bare cuLaunchKernelEx {:.3f} us, get + launch helper {:.3f} us, lookup alone {:.1f} ns\n",
                   dn.bare_us, dn.dispatched_us, dn.lookup_ns);
    else
        fmt::print("load and dispatch skipped: {}\n", dispatch_note);
    fmt::print("\n{:<34} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "kernel", "nvrtc ms", "load ms", "warm db ms",
               "warm ld ms", "warm ms");
    for (const KernelRow& r : rows)
        fmt::print("{:<34} {:>10.1f} {:>10} {:>10.3f} {:>10} {:>10.3f}\n", r.label, r.compile_ms,
                   gpu ? fmt::format("{:.3f}", r.cold_load_ms) : "-", r.warm_fetch_ms,
                   gpu ? fmt::format("{:.3f}", r.warm_load_ms) : "-", r.warm_fetch_ms + r.warm_load_ms);
    if (gpu) fmt::print("{:<34} {:>10.3f} us\n", "dispatch overhead (hit)", dn.overhead_us);
}

}  // namespace

void add_jit_bench(CLI::App& bench) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* c = bench.add_subcommand("jit", "JIT compile, cache load and dispatch overhead");
    c->add_option("--iters", o->iters, "Launches per path in the dispatch benchmark")->envname("KILN_BENCH_JIT_ITERS");
    c->add_option("--reps", o->reps, "Repetitions of the warm-load measurement")->envname("KILN_BENCH_JIT_REPS");
    c->add_flag("--json", o->json, "JSON output")->envname("KILN_JSON");
    c->callback([o] { run_bench(*o); });
}

}  // namespace kiln::jit
