// `kiln bench ...`: benchmarks. Each subcommand runs its module's measurement and prints it (a table,
// or --json); numbers only, nothing here decides pass/fail.
//
//   kiln bench reference [--model DIR | --preset k3-tiny] [--prompt-tokens N] [--decode-tokens N] [--json]
//       prefill and decode tokens/s of the fp32 reference forward pass (model/reference/reference_bench.hpp)
//   kiln bench tokenizer [--model DIR | --preset k3-tiny] [--mb N]
//       encode/decode throughput (model/tokenizer/tokenizer_bench.hpp)
//   kiln bench cache [--sizes 64K,512K,2M] [--iterations N] [--dir DIR] [--json]
//       warm kernel loads from each kind of cache layer (cache/cache_bench.hpp)
//   kiln bench jit [--iters N] [--reps R] [--json]
//       NVRTC compile, cache load and dispatch overhead (jit/jit_bench.hpp)
//   kiln bench host [--min-time S] [--dir DIR] [--json]
//       the host target's compile times and kernel speed (model/bench/host_bench.hpp; builds with host_jit)
//   kiln bench moe [--scenario NAME] [--iters N] [--set FIELD=VALUE ...] [--json FILE] [--routing-dir DIR] ...
//       the W4A16 MoE layer on the K2 / K3 scenarios (model/bench/moe_w4a16_bench.hpp)
//   kiln bench op [--family F] [--case TEXT] [--backend host|cuda] [--iters N] [--json]
//       every op case of tests/ops in perf mode: µs, bytes, FLOPs, the fraction of the floor
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/cache_bench.hpp"
#include "cache/store.hpp"
#include "autotune/heuristics/moe_w4a16.hpp"
#include "jit/jit_bench.hpp"
#include "kiln_config.h"
#include "model/bench/moe_w4a16_bench.hpp"
#include "model/reference/loaded_model.hpp"
#include "model/reference/reference_bench.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/model_source.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tokenizer_bench.hpp"
#endif
#if KILN_HAVE_HOST_JIT
#include "model/bench/host_bench.hpp"
#endif
#include "tests/ops/op_case.hpp"

namespace kiln::cli {

namespace {

using nlohmann::json;

// ---- reference ----

struct ReferenceArgs {
    model::reference::ModelSource source;
    size_t prompt_tokens = 256;
    size_t decode_tokens = 64;
    bool json = false;
};

void run_reference(const ReferenceArgs& a) {
    if (a.prompt_tokens == 0) throw InvalidArgument("--prompt-tokens must be positive");
    model::reference::LoadedModel m = model::reference::load_model(a.source, false);
    const model::reference::ReferenceBenchResult r =
        model::reference::run_reference_bench(*m.model, a.prompt_tokens, a.decode_tokens);
    auto rate = [](size_t n, double s) { return n ? double(n) / std::max(s, 1e-9) : 0.0; };
    const double prefill_tps = rate(r.prompt_tokens, r.prefill_seconds), decode_tps = rate(r.decode_tokens, r.decode_seconds);
    const double prefill_cpu_tps = rate(r.prompt_tokens, r.prefill_cpu_seconds);
    const double decode_cpu_tps = rate(r.decode_tokens, r.decode_cpu_seconds);
    if (a.json) {
        json j{{"model", m.name},
               {"load_seconds", m.load_seconds},
               {"prompt_tokens", r.prompt_tokens},
               {"prefill_seconds", r.prefill_seconds},
               {"prefill_tokens_per_second", prefill_tps},
               {"prefill_tokens_per_cpu_second", prefill_cpu_tps},
               {"decode_tokens", r.decode_tokens},
               {"decode_seconds", r.decode_seconds},
               {"decode_tokens_per_second", decode_tps},
               {"decode_tokens_per_cpu_second", decode_cpu_tps},
               {"state_bytes", r.state_bytes}};
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("reference forward (fp32 CPU, single thread) on {}\n", m.name);
    fmt::print("  load + fp32 conversion {:>10.2f} s\n", m.load_seconds);
    fmt::print("  {:<22} {:>10} {:>14}\n", "", "tok/s", "tok/cpu-s");
    fmt::print("  prefill {:>5} tokens  {:>10.1f} {:>14.1f}   one call: chunked KDA, plain MLA\n", r.prompt_tokens,
               prefill_tps, prefill_cpu_tps);
    fmt::print("  decode  {:>5} tokens  {:>10.1f} {:>14.1f}   one token per call: recurrent KDA, absorbed MLA\n",
               r.decode_tokens, decode_tps, decode_cpu_tps);
    fmt::print("  request state          {:>10.1f} KiB at {} tokens\n", double(r.state_bytes) / 1024, r.state_position);
}

void add_reference_bench(CLI::App& bench) {
    auto a = std::make_shared<ReferenceArgs>();
    auto* cmd = bench.add_subcommand("reference", "Prefill and decode speed of the fp32 reference forward pass");
    add_reference_source_options(*cmd, a->source);
    cmd->add_option("--prompt-tokens", a->prompt_tokens, "prompt length for the prefill measurement")
        ->envname("KILN_BENCH_PROMPT_TOKENS")
        ->capture_default_str()
        ->transform(in_range<size_t>(1, 1 << 20));
    cmd->add_option("--decode-tokens", a->decode_tokens, "tokens decoded one per call")
        ->envname("KILN_BENCH_DECODE_TOKENS")
        ->capture_default_str()
        ->transform(in_range<size_t>(0, 1 << 20));
    add_json_flag(*cmd, a->json, "print JSON");
    cmd->callback([a] { run_reference(*a); });
}

// ---- tokenizer ----

#if KILN_HAVE_TOKENIZER
void add_tokenizer_bench(CLI::App& bench) {
    auto* cmd = bench.add_subcommand("tokenizer", "Encode/decode throughput on generated mixed-script text");
    auto src = std::make_shared<model::reference::ModelSource>();
    auto mb = std::make_shared<double>(4.0);
    add_tokenizer_source_options(*cmd, *src);
    cmd->add_option("--mb", *mb, "megabytes of text to encode (default 4)")
        ->envname("KILN_BENCH_MB")
        ->transform(in_range(0.0, 4096.0));
    cmd->callback([src, mb] {
        if (!(*mb > 0) || *mb > 4096) throw InvalidArgument("--mb must be in (0, 4096]");
        const model::Tokenizer tok = open_tokenizer(*src, true);
        const model::TokenizerBenchResult r = model::run_tokenizer_bench(tok, static_cast<size_t>(*mb * 1e6));
        const double mb_text = static_cast<double>(r.text_bytes) / 1e6;
        fmt::print("tokenizer: vocab {} ids, PCRE2 JIT {}\n", tok.vocab_size(), tok.jit() ? "on" : "off");
        fmt::print("encode: {:.2f} MB in {:.3f} s = {:.2f} MB/s ({:.2f} MB/s of CPU time), {} tokens "
                   "({:.2f} bytes/token, {:.0f} tokens/s)\n",
                   mb_text, r.encode_seconds, mb_text / r.encode_seconds, mb_text / r.encode_cpu_seconds, r.tokens,
                   static_cast<double>(r.text_bytes) / static_cast<double>(r.tokens),
                   static_cast<double>(r.tokens) / r.encode_seconds);
        fmt::print("decode: {:.2f} MB/s\n", mb_text / r.decode_seconds);
    });
}
#endif

// ---- cache ----

struct CacheArgs {
    std::string sizes = "64K,512K,2M";
    int iterations = 200;
    std::string dir;
    bool json = false;
};

void run_cache(const CacheArgs& args) {
    cache::CacheBenchOptions o;
    o.sizes.clear();
    for (const auto& s : cache::split_path_list(args.sizes)) o.sizes.push_back(parse_size_flag("--sizes", s));
    if (o.sizes.empty()) throw InvalidArgument("--sizes: give at least one size");
    if (args.iterations < 1) throw InvalidArgument("--iterations must be at least 1");
    o.iterations = args.iterations;
    o.dir = args.dir;
    const cache::CacheBenchResult r = cache::run_cache_bench(o);
    if (args.json) {
        json rows = json::array();
        for (const auto& row : r.rows)
            rows.push_back({{"bytes", row.bytes},
                            {"layer", row.layer},
                            {"min_ms", row.time.min_ms},
                            {"median_ms", row.time.median_ms},
                            {"p90_ms", row.time.p90_ms},
                            {"mean_ms", row.time.mean_ms}});
        fmt::print("{}\n", json{{"iterations", r.iterations}, {"prebuilt_open_ms", r.prebuilt_open_ms}, {"results", rows}}
                               .dump(2));
        return;
    }
    fmt::print("warm load of one blob incl. its check (user: XXH3-128, prebuilt: SHA-256 against the signed "
               "manifest), {} iterations each (ms)\n",
               r.iterations);
    fmt::print("prebuilt layer open (manifest signature check, {} entries): {:.3f} ms\n\n", r.prebuilt_entries,
               r.prebuilt_open_ms);
    fmt::print("{:>8}  {:<9}  {:>8}  {:>8}  {:>8}  {:>8}\n", "blob", "layer", "min", "median", "p90", "mean");
    for (const auto& row : r.rows)
        fmt::print("{:>8}  {:<9}  {:>8.3f}  {:>8.3f}  {:>8.3f}  {:>8.3f}\n", fmt::format("{}K", row.bytes / 1024),
                   row.layer, row.time.min_ms, row.time.median_ms, row.time.p90_ms, row.time.mean_ms);
    fmt::print("\n('sha256' and 'xxh3' time the digest alone: the part of a load spent verifying the blob)\n");
}

void add_cache_bench(CLI::App& bench) {
    auto args = std::make_shared<CacheArgs>();
    CLI::App* c = bench.add_subcommand("cache", "Warm kernel load from the SQLite user cache and a prebuilt cache");
    c->add_option("--sizes", args->sizes, "Blob sizes, comma separated")->capture_default_str()->envname("KILN_BENCH_CACHE_SIZES");
    c->add_option("--iterations", args->iterations, "Loads timed per size and layer")
        ->capture_default_str()
        ->envname("KILN_BENCH_CACHE_ITERATIONS")
        ->transform(in_range(1, 10'000'000));
    c->add_option("--dir", args->dir, "Scratch directory (default: a temporary one, removed afterwards)")
        ->envname("KILN_BENCH_CACHE_DIR");
    add_json_flag(*c, args->json, "Machine-readable output");
    c->callback([args] { run_cache(*args); });
}

// ---- jit ----

struct JitArgs {
    jit::JitBenchOptions options;
    bool json = false;
};

void run_jit(const JitArgs& a) {
    const jit::JitBenchResult r = jit::run_jit_bench(a.options);
    const bool gpu = r.gpu;
    if (a.json) {
        json j;
        j["device"] = r.device_name;
        j["target"] = jit::to_string(r.target);
        j["nvrtc"] = r.nvrtc;
        j["nvrtc_load_ms"] = r.nvrtc_load_ms;
        j["first_compile_ms"] = r.first_compile_ms;
        j["kernels"] = json::array();
        for (const jit::JitBenchKernel& k : r.kernels)
            j["kernels"].push_back({{"kernel", k.label},
                                    {"descriptor", jit::to_string(k.desc)},
                                    {"nvrtc_ms", k.compile_ms},
                                    {"cold_load_ms", gpu ? json(k.cold_load_ms) : json()},
                                    {"cold_total_ms", k.cold_total_ms},
                                    {"warm_fetch_ms", k.warm_fetch_ms},
                                    {"warm_load_ms", gpu ? json(k.warm_load_ms) : json()},
                                    {"warm_total_ms", k.warm_fetch_ms + k.warm_load_ms}});
        if (gpu)
            j["dispatch"] = {{"bare_launch_us", r.dispatch.bare_us},
                             {"dispatched_launch_us", r.dispatch.dispatched_us},
                             {"overhead_us", r.dispatch.overhead_us},
                             {"lookup_ns", r.dispatch.lookup_ns}};
        else
            j["dispatch"] = {{"skipped", r.dispatch_skipped}};
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("kiln bench jit: device {}, target {}, {} (loaded in {:.1f} ms; first compile {:.1f} ms)\n",
               r.device_name, jit::to_string(r.target), r.nvrtc, r.nvrtc_load_ms, r.first_compile_ms);
    if (gpu)
        fmt::print("dispatch: bare cuLaunchKernelEx {:.3f} us, get + launch helper {:.3f} us, lookup alone {:.1f} ns\n",
                   r.dispatch.bare_us, r.dispatch.dispatched_us, r.dispatch.lookup_ns);
    else
        fmt::print("load and dispatch skipped: {}\n", r.dispatch_skipped);
    fmt::print("\n{:<34} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "kernel", "nvrtc ms", "load ms", "warm db ms",
               "warm ld ms", "warm ms");
    for (const jit::JitBenchKernel& k : r.kernels)
        fmt::print("{:<34} {:>10.1f} {:>10} {:>10.3f} {:>10} {:>10.3f}\n", k.label, k.compile_ms,
                   gpu ? fmt::format("{:.3f}", k.cold_load_ms) : "-", k.warm_fetch_ms,
                   gpu ? fmt::format("{:.3f}", k.warm_load_ms) : "-", k.warm_fetch_ms + k.warm_load_ms);
    if (gpu) fmt::print("{:<34} {:>10.3f} us\n", "dispatch overhead (hit)", r.dispatch.overhead_us);
}

void add_jit_bench(CLI::App& bench) {
    auto a = std::make_shared<JitArgs>();
    CLI::App* c = bench.add_subcommand("jit", "JIT compile, cache load and dispatch overhead");
    c->add_option("--iters", a->options.iters, "Launches per path in the dispatch benchmark")
        ->envname("KILN_BENCH_JIT_ITERS")
        ->transform(in_range(1, 100'000'000));
    c->add_option("--reps", a->options.reps, "Repetitions of the warm-load measurement")
        ->envname("KILN_BENCH_JIT_REPS")
        ->transform(in_range(1, 10'000));
    add_json_flag(*c, a->json, "JSON output");
    c->callback([a] { run_jit(*a); });
}

// ---- host ----

#if KILN_HAVE_HOST_JIT
struct HostArgs {
    model::bench::HostBenchOptions options;
    bool json = false;
};

void run_host(const HostArgs& a) {
    const model::bench::HostBenchResult r = model::bench::run_host_bench(a.options);
    if (a.json) {
        json j;
        j["target"] = r.target;
        j["llvm"] = r.llvm;
        j["threads"] = r.threads;
        j["clang_invocations_cold"] = r.clang_invocations_cold;
        j["clang_invocations_warm"] = r.clang_invocations_warm;
        for (const auto& c : r.compile)
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
        for (const auto& s : r.speed)
            j["speed"].push_back({{"kernel", s.kernel},
                                  {"shape", s.shape},
                                  {"reference_cpu_ms", s.reference_ms},
                                  {"plain_fp32_cpu_ms", s.plain_ms},
                                  {"jit_cpu_ms", s.jit_ms},
                                  {"launch_wall_ms", s.launch_ms},
                                  {"speedup_vs_reference_1_thread", s.reference_ms / s.jit_ms},
                                  {"speedup_vs_plain_fp32_1_thread", s.plain_ms > 0 ? s.plain_ms / s.jit_ms : 0.0},
                                  {"speedup_vs_reference_pool", s.reference_ms / s.launch_ms},
                                  {"jit_gb_per_s_1_thread", s.bytes / (s.jit_ms * 1e6)}});
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("kiln bench host: target {}, LLVM {}, pool of {} threads (KILN_HOST_THREADS)\n\n", r.target, r.llvm,
               r.threads);
    fmt::print("Cold compile into a fresh cache ({} clang runs) and warm load from SQLite by a new loader ({} clang runs)\n",
               r.clang_invocations_cold, r.clang_invocations_warm);
    fmt::print("{:<50} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7} {:>8}\n", "kernel", "clang", "O3", "codegen", "total",
               "cpu", "obj KiB", "warm");
    for (const auto& c : r.compile)
        fmt::print("{:<50} {:>7.1f} {:>7.1f} {:>7.1f} {:>8.1f} {:>8.1f} {:>7.1f} {:>8.3f}\n", c.kernel.substr(0, 50),
                   c.cold.frontend_ms, c.cold.optimize_ms, c.cold.codegen_ms, c.cold.total_ms, c.cold_cpu_ms,
                   c.cold.object_bytes / 1024.0, c.warm.load_ms);
    fmt::print("(milliseconds; clang/O3/codegen/total/warm are wall time, cpu is process CPU time of the cold compile)\n\n");
    fmt::print("Speed: milliseconds per call (median). reference = the family's reference implementation, plain = a "
               "scalar fp32 loop compiled into kiln (moe_w4a16: its reference\nis that plain loop over "
               "weights dequantised to fp32 at load),\nJIT = the host kernel called directly (moe_w4a16: the host layer on a one-thread stream); all three on one thread, "
               "in process CPU time. launch = host stream launch + synchronize on the pool, wall time.\n");
    fmt::print("{:<32} {:<11} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>7}\n", "kernel", "shape", "reference",
               "plain", "JIT", "launch", "xref 1t", "xplain", "xref", "GB/s 1t");
    for (const auto& s : r.speed)
        fmt::print("{:<32} {:<11} {:>10.3f} {:>10} {:>9.3f} {:>9.3f} {:>8.1f} {:>8} {:>8.1f} {:>7.2f}\n", s.kernel,
                   s.shape, s.reference_ms, s.plain_ms < 0 ? std::string("-") : fmt::format("{:.3f}", s.plain_ms),
                   s.jit_ms, s.launch_ms, s.reference_ms / s.jit_ms,
                   s.plain_ms < 0 ? std::string("-") : fmt::format("{:.1f}", s.plain_ms / s.jit_ms),
                   s.reference_ms / s.launch_ms, s.bytes / (s.jit_ms * 1e6));
}

void add_host_bench(CLI::App& bench) {
    auto a = std::make_shared<HostArgs>();
    CLI::App* c = bench.add_subcommand(
        "host", "Host target: cold compile and warm load per kernel, JIT kernels against the reference implementations");
    c->add_option("--min-time", a->options.min_seconds, "Seconds per measurement (median of the runs)")
        ->envname("KILN_BENCH_HOST_MIN_TIME")
        ->transform(in_range(0.0, 60.0));
    c->add_option("--dir", a->options.cache_dir,
                  "Kernel cache directory to compile into (default: a fresh temporary one, removed afterwards)")
        ->envname("KILN_BENCH_HOST_DIR");
    add_json_flag(*c, a->json, "Machine-readable output");
    c->callback([a] { run_host(*a); });
}
#else
void add_host_bench(CLI::App& bench) {
    bench.add_subcommand("host", "Host target (not in this build)")->callback([] {
        throw InvalidArgument("kiln bench host: this kiln was built without the host JIT (-Dhost_jit=disabled)");
    });
}
#endif

// ---- moe ----

struct MoeArgs {
    model::bench::MoeBenchOptions options;
    std::vector<std::string> set;
};

void add_moe_bench(CLI::App& bench) {
    auto a = std::make_shared<MoeArgs>();
    std::string fields;
    for (const auto& f : autotune::moe_w4a16_tuning_fields()) fields += fmt::format("\n  {}: {}", f.name, f.help);
    std::string names;
    for (const auto& n : model::bench::moe_bench_scenarios()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
    CLI::App* c = bench.add_subcommand("moe", "W4A16 MoE layer (routing + gate_up + down) on the K2 / K3 decode and "
                                              "prefill scenarios: us, bytes, TB/s, % of the 4.8 TB/s floor, TFLOP/s");
    c->add_option("--scenario", a->options.scenario, "Only scenarios whose name contains this (" + names + ")")
        ->envname("KILN_BENCH_MOE_SCENARIO");
    c->add_option("--iters", a->options.iters, "Timed iterations per scenario (median reported)")
        ->envname("KILN_BENCH_MOE_ITERS")
        ->transform(in_range(1, 100000));
    c->add_option("--set", a->set,
                  "Change a field of the layer's tuning (repeatable; the environment variable takes a comma list):" +
                      fields)
        ->envname("KILN_BENCH_MOE_SET")
        ->delimiter(',');
    c->add_option("--json", a->options.json_path, "Also write the results to this JSON file")
        ->envname("KILN_BENCH_MOE_JSON");
    c->add_option("--routing-dir", a->options.routing_dir,
                  "Write each scenario's routing (NAME.ids, NAME.weights, NAME.json) here for scripts/bench-humming.py")
        ->envname("KILN_BENCH_MOE_ROUTING_DIR");
    c->add_option("--trace-dir", a->options.trace_dir,
                  "Write NAME.trace.json here for each fused decode scenario: one call's per-item completion times")
        ->envname("KILN_BENCH_MOE_TRACE_DIR");
    c->add_option("--warm-ms", a->options.warm_ms,
                  "Run each scenario back to back for this many milliseconds before timing it (0: a fresh board; "
                  "under sustained load the GPU reaches its power limit and lowers its SM clock)")
        ->envname("KILN_BENCH_MOE_WARM_MS")
        ->transform(in_range(0, 600000));
    c->callback([a] {
        for (const std::string& kv : a->set) {
            const size_t eq = kv.find('=');
            if (eq == std::string::npos) throw InvalidArgument(fmt::format("--set {}: expected FIELD=VALUE", kv));
            autotune::MoeW4A16Tuning probe;  // refuse an unknown field or a bad value before any GPU work
            autotune::set_tuning_field(probe, kv.substr(0, eq), kv.substr(eq + 1));
            a->options.set.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
        }
        model::bench::run_moe_bench(a->options);
    });
}

// ---- op ----

struct OpArgs {
    std::string family, filter, backend;
    int iters = 20, warmup = 3;
    bool json = false;
};

void run_op(const OpArgs& a) {
    std::vector<test::TestBackend*> backends = test::available_backends(a.backend);
    if (backends.empty())
        throw InvalidArgument(a.backend.empty() ? "kiln bench op: no backend available"
                                                : fmt::format("kiln bench op: backend {} is not available here", a.backend));
    ops::CaseList cases = ops::all_cases(a.filter);
    json out = json::array();
    if (!a.json)
        fmt::print("{:<6} {:<78} {:>10} {:>10} {:>10} {:>8}\n", "backend", "case", "us", "MB", "GFLOP", "% floor");
    int ran = 0;
    for (test::TestBackend* b : backends)
        for (auto& c : cases) {
            if ((!a.family.empty() && c->family() != a.family) || !c->runs_on(*b)) continue;
            const ops::PerfResult r = ops::time_case(*c, *b, a.iters, a.warmup);
            ++ran;
            if (a.json) {
                out.push_back({{"backend", r.backend}, {"case", r.name}, {"us", r.us}, {"bytes", r.bytes},
                               {"flops", r.flops}, {"floor_us", r.floor_us}});
                continue;
            }
            fmt::print("{:<6} {:<78} {:>10.2f} {:>10.3f} {:>10.3f} {:>8}\n", r.backend, r.name.substr(0, 78), r.us,
                       r.bytes / 1e6, r.flops / 1e9,
                       r.floor_us > 0 ? fmt::format("{:.1f}", 100.0 * r.floor_us / r.us) : std::string("-"));
            std::fflush(stdout);
        }
    if (ran == 0) throw InvalidArgument("kiln bench op: no case matches");
    if (a.json) fmt::print("{}\n", out.dump(1));
}

void add_op_bench(CLI::App& bench) {
    auto a = std::make_shared<OpArgs>();
    std::string families;
    for (const auto& f : ops::families()) families += fmt::format("{}{}", families.empty() ? "" : ", ", f);
    CLI::App* c = bench.add_subcommand("op", "Every op case (tests/ops) timed on each backend: us, bytes, FLOPs and "
                                             "the fraction of the floor (4.8 TB/s, 790 TFLOP/s on the GPU)");
    c->add_option("--family", a->family, "Only this family's cases (" + families + ")")->envname("KILN_BENCH_OP_FAMILY");
    c->add_option("--case", a->filter, "Only cases whose name contains this")->envname("KILN_BENCH_OP_CASE");
    c->add_option("--backend", a->backend, "host or cuda (default: every backend available)")
        ->envname("KILN_BENCH_OP_BACKEND")
        ->check(CLI::IsMember({"host", "cuda"}));
    c->add_option("--iters", a->iters, "Timed runs per case (median reported)")
        ->envname("KILN_BENCH_OP_ITERS")
        ->transform(in_range(1, 100000));
    c->add_option("--warmup", a->warmup, "Untimed runs first")
        ->envname("KILN_BENCH_OP_WARMUP")
        ->transform(in_range(0, 100000));
    add_json_flag(*c, a->json, "JSON output");
    c->callback([a] { run_op(*a); });
}

}  // namespace

void add_bench_command(CLI::App& app) {
    CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
    add_cache_bench(*bench);
    add_jit_bench(*bench);
    add_moe_bench(*bench);
    add_op_bench(*bench);
    add_reference_bench(*bench);
#if KILN_HAVE_TOKENIZER
    add_tokenizer_bench(*bench);
#endif
    add_host_bench(*bench);
}

}  // namespace kiln::cli
