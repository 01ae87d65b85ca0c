// `kiln jit families` and `kiln jit compile`.
//
//   kiln jit families [--json]
//   kiln jit compile --family F [--arch A] [--mode MODE] [--m M --n N --k K --experts E --topk T]
//                    [--block-m BM] [--warps W] [--descriptor TEXT] [store flags] [--json]
//       compiles one descriptor into the user kernel cache (no GPU needed; --arch defaults to the
//       device's target) and prints its content key; when it is already cached, says "cache hit".
#include <cstdint>
#include <limits>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/family.hpp"
#include "jit/nvrtc.hpp"
#include "runtime/device.hpp"
#include "runtime/exec_target.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/store_flags.hpp"

namespace kiln::cli {

using namespace kiln::jit;

namespace {

struct CompileOptions {
    std::string family, mode, arch, descriptor;
    StoreFlags store;
    int m = 0, n = 0, k = 0, experts = 0, topk = 0, block_m = 0, warps = 0;
    bool json = false;
};

// --arch when given; else KILN_TARGET / --target (auto: the device's arch, or the host target when
// there is no device).
Target choose_target(const std::string& arch) {
    if (!arch.empty()) return parse_target(arch);
    try {
        if (runtime::exec_target() == runtime::ExecTarget::host) return Target::host_target();
    } catch (const runtime::NoDevice& e) {
        throw InvalidArgument(fmt::format("{} ({}): pass --arch, e.g. --arch sm_90a", e.what(),
                                          runtime::driver_status().reason));
    }
    return parse_target(runtime::device_props(0).target());
}

void run_families(bool json) {
    std::vector<const Family*> fams = builtin_families().list();
    if (json) {
        nlohmann::json out = nlohmann::json::array();
        for (const Family* f : fams)
            out.push_back({{"family", f->name()}, {"modes", f->modes()}, {"dims", f->dims()},
                           {"host", f->has_host_source()}, {"summary", f->summary()}});
        fmt::print("{}\n", out.dump(2));
        return;
    }
    fmt::print("{:<14} {:<10} {:<5} {}\n", "FAMILY", "MODES", "HOST", "DESCRIPTION");
    for (const Family* f : fams) {
        std::string modes;
        for (const auto& m : f->modes()) modes += (modes.empty() ? "" : ",") + m;
        fmt::print("{:<14} {:<10} {:<5} {}\n", f->name(), modes, f->has_host_source() ? "yes" : "no", f->summary());
        fmt::print("{:<14} {:<10} {:<5} bakes in: {}\n", "", "", "", f->dims());
    }
}

void run_compile(const CompileOptions& o) {
    KernelDescriptor d;
    if (!o.descriptor.empty()) {
        d = parse_descriptor(o.descriptor);
    } else {
        if (o.family.empty()) throw InvalidArgument("--family is required (see `kiln jit families`)");
        d.family = ShortName(o.family);
        if (!o.mode.empty()) d.mode = ShortName(o.mode);
        d.m = o.m;
        d.n = o.n;
        d.k = o.k;
        d.experts = o.experts;
        d.topk = o.topk;
        d.config.block_m = static_cast<uint16_t>(o.block_m);
        d.config.warps = static_cast<uint8_t>(o.warps);
        d.target = choose_target(o.arch);
    }
    cache::Store store(o.store.options());
    DispatcherOptions dopt;
    dopt.store = &store;
    Dispatcher disp(dopt);
    BuildResult r = disp.build(d);
    // Compiling into the cache is what this command is for: a kernel that could not be stored (a
    // read-only cache, a full disk) is a failure, not a result.
    if (!r.cache_hit && !store.caching_enabled())
        throw cache::CacheError(fmt::format("compiled {} (key {}) but cannot store it: {}", to_string(r.desc),
                                            r.key.hex(), store.stats().disabled_reason));
    if (o.json) {
        nlohmann::json j = {{"key", r.key.hex()},
                            {"cache_hit", r.cache_hit},
                            {"layer", r.layer},
                            {"descriptor", to_string(r.desc)},
                            {"family", r.desc.family.view()},
                            {"mode", r.desc.mode.view()},
                            {"target", r.target.empty() ? to_string(r.desc.target) : r.target},
                            {"kernel", r.kernel_name},
                            {"compiler", r.compiler},
                            {"compile_ms", r.compile_ms},
                            {"bytes", r.bytes},
                            {"cache_enabled", store.caching_enabled()},
                            {"nvrtc_loaded", Nvrtc::is_loaded()},
                            {"cache_db", store.user_db_path()}};
        fmt::print("{}\n", j.dump(2));
        return;
    }
    if (r.cache_hit)
        fmt::print("cache hit ({}): {}\n", r.layer == "user" ? std::string("user cache") : "prebuilt " + r.layer, r.key.hex());
    else fmt::print("compiled: {}\n", r.key.hex());
    fmt::print("  descriptor  {}\n", to_string(r.desc));
    fmt::print("  kernel      {}\n", r.kernel_name);
    if (r.desc.target.is_host()) fmt::print("  target      {}\n", r.target);
    fmt::print("  compiler    {}{}\n", r.compiler,
               r.cache_hit ? fmt::format(" (compiled earlier in {:.1f} ms)", r.compile_ms)
                           : fmt::format(", {} {:.1f} ms", r.desc.target.is_host() ? "clang + LLVM" : "NVRTC",
                                         r.compile_ms));
    fmt::print("  {:<11} {} bytes\n", r.desc.target.is_host() ? "object" : "cubin", r.bytes);
    if (!r.cache_hit)
        fmt::print("  cache       {}\n", store.user_db_path());
}

}  // namespace

void add_jit_command(CLI::App& app) {
    CLI::App* jit = app.add_subcommand("jit", "JIT kernel families and compiles");
    jit->require_subcommand(1);

    auto json_fam = std::make_shared<bool>(false);
    CLI::App* fam = jit->add_subcommand("families", "List the registered kernel families");
    add_json_flag(*fam, *json_fam, "JSON output");
    fam->callback([json_fam] { run_families(*json_fam); });

    auto o = std::make_shared<CompileOptions>();
    CLI::App* c = jit->add_subcommand("compile", "Compile one kernel into the kernel cache and print its content key");
    c->add_option("--family", o->family, "Kernel family (see `kiln jit families`)")->envname("KILN_JIT_FAMILY");
    c->add_option("--arch", o->arch,
                  "Target, e.g. sm_90a, or host (default: KILN_TARGET; auto = the device's, else host)")
        ->envname("KILN_JIT_ARCH");
    c->add_option("--mode", o->mode, "Family mode (default: the family's first)")->envname("KILN_JIT_MODE");
    // Descriptor fields are int32; config fields as narrow as the descriptor stores them (a CTA has at
    // most 32 warps).
    const int dim_max = std::numeric_limits<int32_t>::max();
    c->add_option("--m", o->m, "M-bucket")->envname("KILN_JIT_M")->transform(in_range(0, dim_max));
    c->add_option("--n", o->n, "N")->envname("KILN_JIT_N")->transform(in_range(0, dim_max));
    c->add_option("--k", o->k, "K")->envname("KILN_JIT_K")->transform(in_range(0, dim_max));
    c->add_option("--experts", o->experts, "Expert count")->envname("KILN_JIT_EXPERTS")->transform(in_range(0, dim_max));
    c->add_option("--topk", o->topk, "Experts per token")->envname("KILN_JIT_TOPK")->transform(in_range(0, dim_max));
    c->add_option("--block-m", o->block_m, "Config: block_m (0 = family default)")
        ->envname("KILN_JIT_BLOCK_M")
        ->transform(in_range(0, int(std::numeric_limits<uint16_t>::max())));
    c->add_option("--warps", o->warps, "Config: warps per CTA (0 = family default)")
        ->envname("KILN_JIT_WARPS")
        ->transform(in_range(0, 32));
    c->add_option("--descriptor", o->descriptor, "A full descriptor in canonical text form (overrides the above)")
        ->envname("KILN_JIT_DESCRIPTOR");
    add_store_flags(*c, o->store);
    add_json_flag(*c, o->json, "JSON output");
    c->callback([o] { run_compile(*o); });
}

}  // namespace kiln::cli
