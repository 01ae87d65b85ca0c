// `kiln info [--json]`: what kiln sees on this machine: version and features, the CUDA driver and
// devices, the chosen compile target, NVRTC and the CUDA headers, the kernel-key compiler identity,
// templates, and the kernel cache locations and sizes. Never fails for a missing GPU or toolkit: it
// reports what is missing.
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/sku.hpp"
#include "autotune/tune_db.hpp"
#include "autotune/tuned_tables.hpp"
#include "cache/store.hpp"
#include "jit/cuda_toolkit.hpp"
#include "jit/kernel_key.hpp"
#include "jit/nvrtc.hpp"
#include "jit/template_store.hpp"
#include "kiln_config.h"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/exec_target.hpp"
#include "runtime/host/stream.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/human_format.hpp"
#include "serving/cli/store_flags.hpp"
#if KILN_HAVE_HOST_JIT
#include "jit/host_compiler.hpp"
#endif

namespace kiln::cli {

namespace {

// Which tuning dispatch uses on this machine's target: the tune DB's windows, or the heuristics and why.
nlohmann::json tuning_state(const std::string& tune_db) {
    nlohmann::json t;
    t["db"] = tune_db;
    if (tune_db.empty()) {
        t["in_force"] = "heuristics";
        t["reason"] = "no tune DB (--tune, KILN_TUNE_DB; kiln tune writes one)";
        return t;
    }
    try {
        const bool host = runtime::exec_target() == runtime::ExecTarget::host;
        const autotune::SkuIdentity sku =
            host ? autotune::host_sku(runtime::HostBackend().compute_units()) : autotune::cuda_sku(0);
        const autotune::TunedTables tables = autotune::TunedTables::load(tune_db, sku);
        t["sku"] = tables.sku().summary();
        t["shapes"] = tables.shapes().size();
        t["windows"] = tables.windows().size();
        t["verify_cost"] = tables.verify_cost().has_value();
        if (tables.empty()) {
            t["in_force"] = "heuristics";
            t["reason"] = "the tune DB has no windows yet (kiln tune --resume finishes it)";
        } else {
            t["in_force"] = "tuned";
            t["reason"] = "";
        }
    } catch (const Error& e) {
        t["in_force"] = "heuristics";
        t["reason"] = std::string("tune DB refused: ") + e.what();
    }
    return t;
}

nlohmann::json collect(cache::StoreOptions store_options, const std::string& tune_db) {
    nlohmann::json j;
    j["version"] = KILN_VERSION;
    j["host_jit"] = static_cast<bool>(KILN_HAVE_HOST_JIT);

    const runtime::DriverStatus& ds = runtime::driver_status();
    j["driver"] = {{"state", runtime::to_string(ds.state)},
                   {"library", ds.library},
                   {"version", ds.driver_version ? runtime::format_cuda_version(ds.driver_version) : ""},
                   {"reason", ds.reason}};
    j["devices"] = nlohmann::json::array();
    std::string target = "host";
    for (const runtime::DeviceProps& p : runtime::all_devices()) {
        j["devices"].push_back({{"ordinal", p.ordinal},
                                {"name", p.name},
                                {"compute_capability", fmt::format("{}.{}", p.cc_major, p.cc_minor)},
                                {"sm_count", p.sm_count},
                                {"memory_bytes", p.total_memory},
                                {"l2_bytes", p.l2_bytes},
                                {"max_smem_optin", p.max_smem_per_block_optin},
                                {"pci_bus_id", p.pci_bus_id},
                                {"target", p.target()}});
        if (p.ordinal == 0) target = p.target();
    }
    // Where kernels run: KILN_TARGET / --target, auto = the device, else the host target.
    try {
        std::string why;
        if (runtime::exec_target(&why) == runtime::ExecTarget::host) {
#if KILN_HAVE_HOST_JIT
            target = jit::HostTarget::detect().name();
#endif
        }
        j["target_reason"] = why;
    } catch (const Error& e) {
        target = "none";
        j["target_reason"] = e.what();
    }
    j["target"] = target;

    try {
        jit::Nvrtc& n = jit::Nvrtc::instance();
        j["nvrtc"] = {{"found", true}, {"version", fmt::format("{}.{}", n.major(), n.minor())},
                      {"library", n.library_path()}, {"max_parallel", jit::max_parallel_compiles()}};
    } catch (const Error& e) {
        j["nvrtc"] = {{"found", false}, {"error", e.what()}};
    }
    try {
        jit::CudaHeaders h = jit::locate_cuda_headers();
        j["cuda_headers"] = {{"found", true}, {"include", h.include}, {"cccl", h.cccl},
                             {"version", h.cuda_version ? runtime::format_cuda_version(h.cuda_version) : ""}};
    } catch (const Error& e) {
        j["cuda_headers"] = {{"found", false}, {"error", e.what()}};
    }
    try {
        j["key_compiler_identity"] = jit::compiler_identity();
    } catch (const Error& e) {
        j["key_compiler_identity"] = std::string("error: ") + e.what();
    }
    const jit::TemplateStore& ts = jit::TemplateStore::instance();
    j["templates"] = {{"source", ts.override_dir().empty() ? "embedded" : ts.override_dir()},
                      {"count", ts.names().size()}};

    // Inspect the caches without creating or writing anything.
    store_options.read_only = true;
    const std::string dir = store_options.cache_dir.empty() ? cache::default_cache_dir() : store_options.cache_dir;
    j["cache"] = {{"user_dir", dir}, {"layers", nlohmann::json::array()}};
    try {
        cache::Store store(store_options);
        cache::Store::Stats st = store.stats();
        j["cache"]["user_db"] = store.user_db_path();
        j["cache"]["entries"] = st.entries;
        j["cache"]["bytes"] = st.bytes;
        j["cache"]["max_bytes"] = st.max_bytes;
        for (const auto& l : st.layers)
            j["cache"]["layers"].push_back({{"name", l.name}, {"path", l.path}, {"trust", l.trust},
                                            {"entries", l.entries}, {"bytes", l.bytes},
                                            {"file_bytes", l.file_bytes}});
    } catch (const Error& e) {
        j["cache"]["error"] = e.what();
    }
    j["tuning"] = tuning_state(tune_db);
    return j;
}

void print_human(const nlohmann::json& j) {
    fmt::print("kiln {}  (host JIT: {})\n", j["version"].get<std::string>(), j["host_jit"].get<bool>() ? "yes" : "no");
    const auto& d = j["driver"];
    if (d["state"] == "ready")
        fmt::print("CUDA driver  {} ({})\n", d["version"].get<std::string>(), d["library"].get<std::string>());
    else
        fmt::print("CUDA driver  none: {}\n", d["reason"].get<std::string>());
    for (const auto& dev : j["devices"])
        fmt::print("device {}     {}, CC {}, {} SMs, {} memory, {} smem/block opt-in, target {}\n",
                   dev["ordinal"].get<int>(), dev["name"].get<std::string>(),
                   dev["compute_capability"].get<std::string>(), dev["sm_count"].get<int>(),
                   human_bytes(dev["memory_bytes"].get<uint64_t>()), human_bytes(dev["max_smem_optin"].get<uint64_t>()),
                   dev["target"].get<std::string>());
    fmt::print("target       {} ({})\n", j["target"].get<std::string>(), j["target_reason"].get<std::string>());
    const auto& n = j["nvrtc"];
    if (n["found"].get<bool>())
        fmt::print("NVRTC        {} ({}), up to {} parallel compiles\n", n["version"].get<std::string>(),
                   n["library"].get<std::string>(), n["max_parallel"].get<int>());
    else
        fmt::print("NVRTC        not found: {}\n", n["error"].get<std::string>());
    const auto& h = j["cuda_headers"];
    if (h["found"].get<bool>())
        fmt::print("CUDA headers {} (CUDA {}), CCCL {}\n", h["include"].get<std::string>(),
                   h["version"].get<std::string>(), h["cccl"].get<std::string>());
    else
        fmt::print("CUDA headers not found: {}\n", h["error"].get<std::string>());
    fmt::print("kernel keys  compiler identity {}\n", j["key_compiler_identity"].get<std::string>());
    fmt::print("templates    {} ({} files)\n", j["templates"]["source"].get<std::string>(),
               j["templates"]["count"].get<size_t>());
    const auto& c = j["cache"];
    fmt::print("cache dir    {}\n", c["user_dir"].get<std::string>());
    if (c.contains("error")) fmt::print("cache        unreadable: {}\n", c["error"].get<std::string>());
    for (const auto& l : c["layers"])
        fmt::print("cache layer  {} ({}): {} kernels, {} of kernels, {} on disk\n", l["path"].get<std::string>(),
                   l["trust"].get<std::string>(), l["entries"].get<uint64_t>(), human_bytes(l["bytes"].get<uint64_t>()),
                   human_bytes(l["file_bytes"].get<uint64_t>()));
    const auto& t = j["tuning"];
    if (t["in_force"] == "tuned")
        fmt::print("tuning       tuned: {} ({}; {} shapes, {} windows{})\n", t["db"].get<std::string>(),
                   t["sku"].get<std::string>(), t["shapes"].get<size_t>(), t["windows"].get<size_t>(),
                   t["verify_cost"].get<bool>() ? ", verify_cost" : "");
    else
        fmt::print("tuning       heuristics (autotune/heuristics): {}\n", t["reason"].get<std::string>());
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto json = std::make_shared<bool>(false);
    auto flags = std::make_shared<StoreFlags>();
    auto tune_db = std::make_shared<std::string>();
    CLI::App* c = app.add_subcommand("info", "Devices, driver, NVRTC, target and kernel cache of this machine");
    add_json_flag(*c, *json, "JSON output");
    add_store_flags(*c, *flags);
    c->add_option("--tune", *tune_db, "tune DB whose tables dispatch would use (kiln tune writes one)")
        ->envname("KILN_TUNE_DB");
    c->callback([json, flags, tune_db] {
        nlohmann::json j = collect(flags->options(), *tune_db);
        if (*json) fmt::print("{}\n", j.dump(2));
        else print_human(j);
    });
}

}  // namespace kiln::cli
