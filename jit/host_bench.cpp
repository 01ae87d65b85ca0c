#include "jit/host_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "jit/family_dequant_gemv.hpp"
#include "jit/family_moe_routing.hpp"
#include "jit/host_compiler.hpp"
#include "jit/host_kernel_loader.hpp"
#include "jit/host_launch.hpp"
#include "runtime/bf16.hpp"
#include "runtime/error.hpp"
#include "runtime/host_executor.hpp"

namespace kiln::jit {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using runtime::DType;
using runtime::TensorView;

struct BenchOptions {
    double min_seconds = 0.3;  // per measurement
    std::string cache_dir;     // "" = a fresh temporary directory (cold compiles are really cold)
    bool json = false;
};

double process_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

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
        const double c0 = process_cpu_ms();
        auto t0 = Clock::now();
        fn();
        wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        cpu.push_back(process_cpu_ms() - c0);
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

struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "kiln-bench-host-XXXXXX").string();
        if (mkdtemp(tmpl.data()) == nullptr) throw IoError("kiln bench host: cannot create a temporary directory");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
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

struct CompileRow {
    std::string kernel;
    HostCompileStats cold, warm;
    double cold_cpu_ms = 0;
};

struct SpeedRow {
    std::string kernel, shape;
    double reference_ms = 0;   // CPU ms, one thread
    double plain_ms = -1;      // CPU ms, one thread (-1: none)
    double jit_ms = 0;         // CPU ms, one thread, the kernel called directly
    double launch_ms = 0;      // wall ms: launch on a host stream with the whole pool + synchronize
    double bytes = 0;          // bytes the kernel must touch, for GB/s
};

void run(const BenchOptions& o) {
    TempDir tmp;
    cache::StoreOptions so;
    so.cache_dir = o.cache_dir.empty() ? (tmp.path / "cache").string() : o.cache_dir;
    cache::Store store(so);

    const Target host = Target::host_target();
    const std::vector<KernelDescriptor> kernels = {
        MoeRoutingFamily::descriptor(896, 16, host, 16),      // K3: 896 experts, top-16
        MoeRoutingFamily::descriptor(384, 8, host, 64),       // K2: 384 experts, top-8
        DequantGemvFamily::descriptor(1, 2048, 7168, host),   // K2 expert gate/up rows, decode
        DequantGemvFamily::descriptor(1, 7168, 2048, host),   // K2 expert down, decode
        DequantGemvFamily::descriptor(8, 3584, 7168, host),   // K3 latent down-projection, batch 8
        DequantGemvFamily::descriptor(16, 4096, 4096, host),  // square, batch 16
    };

    // 1. Cold compiles, then warm loads by a second loader on the same store.
    std::vector<CompileRow> compile_rows;
    const uint64_t clang_before = HostCompiler::clang_invocations();
    std::string target_name;
    {
        HostKernelLoader cold({&store});
        target_name = cold.compiler().target().name();
        for (const auto& d : kernels) {
            const double c0 = process_cpu_ms();
            const LoadedKernel& k = cold.get(d);
            compile_rows.push_back({to_string(k.desc), cold.stats(k), {}, process_cpu_ms() - c0});
        }
    }
    const uint64_t clang_cold = HostCompiler::clang_invocations() - clang_before;
    HostKernelLoader loader({&store});
    for (size_t i = 0; i < kernels.size(); ++i) compile_rows[i].warm = loader.stats(loader.get(kernels[i]));
    const uint64_t clang_warm = HostCompiler::clang_invocations() - clang_before - clang_cold;

    // 2. Speed against the references.
    runtime::HostStream stream;  // the process pool (KILN_HOST_THREADS)
    DirectRunner direct;
    std::vector<SpeedRow> speed;
    std::mt19937_64 rng(42);

    {
        const KernelDescriptor& d = kernels[0];
        const LoadedKernel& k = loader.get(d);
        for (int tokens : {1, 64, 4096}) {
            std::uniform_int_distribution<int> pick(0, d.experts - 1);
            std::vector<int32_t> ids(static_cast<size_t>(tokens) * d.topk);
            for (auto& id : ids) id = pick(rng);
            const int64_t cap = moe_routing_capacity(tokens, d.topk, d.experts, d.config.block_m);
            const int64_t blocks = cap / d.config.block_m;
            std::vector<int32_t> sorted(cap), block(blocks), counts(d.experts), total(1);
            MoeRoutingArgs a;
            a.topk_ids = TensorView::contiguous(ids.data(), DType::i32, {tokens, d.topk});
            a.sorted_ids = TensorView::contiguous(sorted.data(), DType::i32, {cap});
            a.block_expert = TensorView::contiguous(block.data(), DType::i32, {blocks});
            a.tokens_per_expert = TensorView::contiguous(counts.data(), DType::i32, {d.experts});
            a.total_padded = TensorView::contiguous(total.data(), DType::i32, {1});
            const MoeRoutingHostArgs packed = pack_moe_routing(k, a);
            SpeedRow r;
            r.kernel = fmt::format("moe_routing e={} topk={} bm={}", d.experts, d.topk, d.config.block_m);
            r.shape = fmt::format("tokens={}", tokens);
            r.reference_ms = measure([&] {
                auto ref = moe_routing_reference(ids, tokens, d.topk, d.experts, d.config.block_m, cap, blocks);
                if (ref.total_padded < 0) throw Error("unreachable");
            }, o.min_seconds).cpu_ms;
            r.jit_ms = measure([&] { direct(k, &packed); }, o.min_seconds).cpu_ms;
            r.launch_ms = measure([&] { launch_moe_routing(k, a, stream); stream.synchronize(); }, o.min_seconds).wall_ms;
            auto ref = moe_routing_reference(ids, tokens, d.topk, d.experts, d.config.block_m, cap, blocks);
            if (ref.sorted_ids != sorted || ref.block_expert != block)
                throw Error("kiln bench host: moe_routing result differs from the reference");
            r.bytes = static_cast<double>(ids.size() * 4 + (cap + blocks) * 4);
            speed.push_back(r);
        }
    }
    for (size_t i = 2; i < kernels.size(); ++i) {
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
        const DequantGemvHostArgs hargs = pack_dequant_gemv(k, a);
        SpeedRow r;
        r.kernel = fmt::format("dequant_gemv n={} k={}", n, kk);
        r.shape = fmt::format("m={}", m);
        std::vector<double> ref;
        r.reference_ms = measure([&] { ref = dequant_gemv_reference(x, m, packed, scale, n, kk); }, o.min_seconds).cpu_ms;
        r.plain_ms = measure([&] { plain_fp32_gemv(x.data(), m, packed.data(), scale.data(), n, kk, yp.data()); },
                             o.min_seconds).cpu_ms;
        r.jit_ms = measure([&] { direct(k, &hargs); }, o.min_seconds).cpu_ms;
        r.launch_ms = measure([&] { launch_dequant_gemv(k, a, stream); stream.synchronize(); }, o.min_seconds).wall_ms;
        double worst = 0;
        for (size_t j = 0; j < y.size(); ++j) {
            const double got = runtime::bf16_to_float(y[j]);
            worst = std::max(worst, std::fabs(got - ref[j]) / (std::fabs(ref[j]) + 1e-3));
        }
        if (!(worst < 0.05)) throw Error(fmt::format("kiln bench host: dequant_gemv differs from the reference ({})", worst));
        r.bytes = static_cast<double>(packed.size() * 4 + scale.size() * 2 + x.size() * 2 + y.size() * 2);
        speed.push_back(r);
    }

    const unsigned threads = stream.pool().threads();
    if (o.json) {
        nlohmann::json j;
        j["target"] = target_name;
        j["llvm"] = HostCompiler::llvm_version();
        j["threads"] = threads;
        j["clang_invocations_cold"] = clang_cold;
        j["clang_invocations_warm"] = clang_warm;
        for (const auto& c : compile_rows)
            j["compile"].push_back({{"kernel", c.kernel},
                                    {"clang_ms", c.cold.frontend_ms},
                                    {"o3_ms", c.cold.optimize_ms},
                                    {"codegen_ms", c.cold.codegen_ms},
                                    {"cold_total_ms", c.cold.total_ms},
                                    {"cold_cpu_ms", c.cold_cpu_ms},
                                    {"object_bytes", c.cold.object_bytes},
                                    {"warm_load_ms", c.warm.load_ms},
                                    {"warm_total_ms", c.warm.total_ms},
                                    {"warm_from_cache", c.warm.cache_hit}});
        for (const auto& r : speed)
            j["speed"].push_back({{"kernel", r.kernel},
                                  {"shape", r.shape},
                                  {"reference_cpu_ms", r.reference_ms},
                                  {"plain_fp32_cpu_ms", r.plain_ms},
                                  {"jit_cpu_ms", r.jit_ms},
                                  {"launch_wall_ms", r.launch_ms},
                                  {"speedup_vs_reference_1_thread", r.reference_ms / r.jit_ms},
                                  {"speedup_vs_plain_fp32_1_thread", r.plain_ms > 0 ? r.plain_ms / r.jit_ms : 0.0},
                                  {"speedup_vs_reference_pool", r.reference_ms / r.launch_ms},
                                  {"jit_gb_per_s_1_thread", r.bytes / (r.jit_ms * 1e6)}});
        fmt::print("{}\n", j.dump(2));
        return;
    }

    fmt::print("kiln bench host: target {}, LLVM {}, pool of {} threads (KILN_HOST_THREADS)\n\n", target_name,
               HostCompiler::llvm_version(), threads);
    fmt::print("Cold compile into a fresh cache ({} clang runs) and warm load from SQLite by a new loader ({} clang runs)\n",
               clang_cold, clang_warm);
    fmt::print("{:<50} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7} {:>8}\n", "kernel", "clang", "O3", "codegen", "total",
               "cpu", "obj KiB", "warm");
    for (const auto& c : compile_rows)
        fmt::print("{:<50} {:>7.1f} {:>7.1f} {:>7.1f} {:>8.1f} {:>8.1f} {:>7.1f} {:>8.3f}\n", c.kernel.substr(0, 50),
                   c.cold.frontend_ms, c.cold.optimize_ms, c.cold.codegen_ms, c.cold.total_ms, c.cold_cpu_ms,
                   c.cold.object_bytes / 1024.0, c.warm.load_ms);
    fmt::print("(milliseconds; clang/O3/codegen/total/warm are wall time, cpu is process CPU time of the cold compile)\n\n");
    fmt::print("Speed: milliseconds per call (median). reference = the family's reference implementation, plain = a "
               "scalar fp32 loop compiled into kiln,\nJIT = the host kernel called directly; all three on one thread, "
               "in process CPU time. launch = host stream launch + synchronize on the pool, wall time.\n");
    fmt::print("{:<32} {:<11} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>7}\n", "kernel", "shape", "reference",
               "plain", "JIT", "launch", "xref 1t", "xplain", "xref", "GB/s 1t");
    for (const auto& r : speed)
        fmt::print("{:<32} {:<11} {:>10.3f} {:>10} {:>9.3f} {:>9.3f} {:>8.1f} {:>8} {:>8.1f} {:>7.2f}\n", r.kernel,
                   r.shape, r.reference_ms, r.plain_ms < 0 ? std::string("-") : fmt::format("{:.3f}", r.plain_ms),
                   r.jit_ms, r.launch_ms, r.reference_ms / r.jit_ms,
                   r.plain_ms < 0 ? std::string("-") : fmt::format("{:.1f}", r.plain_ms / r.jit_ms),
                   r.reference_ms / r.launch_ms, r.bytes / (r.jit_ms * 1e6));
}

}  // namespace

void add_host_bench(CLI::App& bench) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* c = bench.add_subcommand(
        "host", "Host target: cold compile and warm load per kernel, JIT kernels against the reference implementations");
    c->add_option("--min-time", o->min_seconds, "Seconds per measurement (median of the runs)")
        ->envname("KILN_BENCH_HOST_MIN_TIME")
        ->check(CLI::Range(0.0, 60.0));
    c->add_option("--dir", o->cache_dir,
                  "Kernel cache directory to compile into (default: a fresh temporary one, removed afterwards)")
        ->envname("KILN_BENCH_HOST_DIR");
    c->add_flag("--json", o->json, "Machine-readable output")->envname("KILN_JSON");
    c->callback([o] { run(*o); });
}

}  // namespace kiln::jit
