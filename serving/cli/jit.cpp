// `kiln jit families` and `kiln jit compile`.
//
//   kiln jit families [--json]
//   kiln jit compile --family F [--arch A] [--mode MODE] [--m M --n N --k K --experts E --topk T]
//                    [--weight-format W] [--<config field> VALUE ...] [--descriptor TEXT] [store flags] [--json]
//       compiles one descriptor into the user kernel cache (no GPU needed; --arch defaults to the
//       device's target) and prints its content key; when it is already cached, says "cache hit".
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/family.hpp"
#include "jit/nvrtc.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/exec_target.hpp"
#include "runtime/error.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/store_flags.hpp"

namespace kiln::cli {

using namespace kiln::jit;

namespace {

struct CompileOptions {
    std::string family, mode, arch, descriptor, weight_format;
    StoreFlags store;
    int m = 0, n = 0, k = 0, experts = 0, topk = 0;
    std::map<std::string, std::string> config;  // config field name -> value as given
    bool json = false;
};

// "block_m" -> "block-m"
std::string flag_name(std::string_view field) {
    std::string f(field);
    for (char& c : f)
        if (c == '_') c = '-';
    return f;
}

// A config field's value from its flag, with the flag's error format ("--warps: 257 is out of range [0, 32]").
int64_t config_flag_value(const std::string& flag, const ConfigField& f, const std::string& text) {
    if (!f.choices.empty()) {
        std::string names;
        for (const auto& n : f.choices) {
            if (n == text) return &n - f.choices.data();
            names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
        }
        throw InvalidArgument(fmt::format("{}: '{}' is not one of {}", flag, text, names));
    }
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && p == text.data() + text.size() && (v < f.min || v > f.max)))
        throw InvalidArgument(fmt::format("{}: {} is out of range [{}, {}]", flag, text, f.min, f.max));
    if (ec != std::errc() || p != text.data() + text.size() || text.empty())
        throw InvalidArgument(fmt::format("{}: '{}' is not an integer", flag, text));
    return v;
}

// Every settable config field of the registered families, once per name (first family's help).
std::vector<const ConfigField*> all_config_fields() {
    std::vector<const ConfigField*> out;
    for (const Family* fam : builtin_families().list())
        for (const ConfigField& f : fam->config_fields()) {
            if (f.derived) continue;
            bool seen = false;
            for (const ConfigField* g : out) seen = seen || g->name == f.name;
            if (!seen) out.push_back(&f);
        }
    return out;
}

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
        {
            nlohmann::json fields = nlohmann::json::array();
            for (const ConfigField& c : f->config_fields()) {
                nlohmann::json jf = {{"name", c.name}, {"min", c.min}, {"max", c.max}, {"derived", c.derived},
                                     {"help", c.help}};
                if (!c.choices.empty()) {
                    std::vector<std::string> ch(c.choices.begin(), c.choices.end());
                    jf["choices"] = ch;
                }
                fields.push_back(jf);
            }
            out.push_back({{"family", f->name()}, {"modes", f->modes()}, {"dims", f->dims()},
                           {"host", f->has_host_source()}, {"device_only", f->device_only()},
                           {"config", fields}, {"summary", f->summary()}});
        }
        fmt::print("{}\n", out.dump(2));
        return;
    }
    fmt::print("{:<24} {:<8} {:<5} {}\n", "FAMILY", "MODES", "HOST", "DESCRIPTION");
    for (const Family* f : fams) {
        std::string modes;
        for (const auto& m : f->modes()) modes += (modes.empty() ? "" : ",") + m;
        fmt::print("{:<24} {:<8} {:<5} {}\n", f->name(), modes, f->has_host_source() ? "yes" : "no", f->summary());
        fmt::print("{:<24} {:<8} {:<5} bakes in: {}\n", "", "", "", f->dims());
        std::string cfg;
        for (const ConfigField& c : f->config_fields()) {
            std::string range;
            if (!c.choices.empty())
                for (auto n : c.choices) range += fmt::format("{}{}", range.empty() ? "" : "|", n);
            else range = fmt::format("{}..{}", c.min, c.max);
            cfg += fmt::format("{}{}{}={}", cfg.empty() ? "" : " ", c.derived ? "(" : "", c.name,
                               range + (c.derived ? ")" : ""));
        }
        if (!cfg.empty()) fmt::print("{:<24} {:<8} {:<5} config: {}\n", "", "", "", cfg);
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
        if (!o.weight_format.empty()) d.weight_format = parse_weight_format(o.weight_format);
        const Family& fam = builtin_families().get(o.family);
        for (const auto& [name, text] : o.config) {
            const ConfigField* f = fam.field(name);
            const std::string flag = "--" + flag_name(name);
            if (f == nullptr || f->derived)
                throw InvalidArgument(fmt::format("{}: family {} has no config field {} (see `kiln jit families`)", flag,
                                                  o.family, name));
            set_config_value(d.config, *f, config_flag_value(flag, *f, text));
        }
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
    c->add_option("--weight-format", o->weight_format, "Weight format: int4_g32_bf16 or mxfp4_g32_e8m0")
        ->envname("KILN_JIT_WEIGHT_FORMAT");
    // Every family's config fields (checked against the chosen family's table: range or choice names).
    for (const ConfigField* f : all_config_fields()) {
        const std::string name(f->name), flag = flag_name(f->name);
        std::string env = "KILN_JIT_" + name;
        for (char& ch : env) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        c->add_option_function<std::string>(
             "--" + flag, [o, name](const std::string& v) { o->config[name] = v; },
             fmt::format("Config: {} ({}; see `kiln jit families`)", name, f->help))
            ->envname(env);
    }
    c->add_option("--descriptor", o->descriptor, "A full descriptor in canonical text form (overrides the above)")
        ->envname("KILN_JIT_DESCRIPTOR");
    add_store_flags(*c, o->store);
    add_json_flag(*c, o->json, "JSON output");
    c->callback([o] { run_compile(*o); });
}

}  // namespace kiln::cli
