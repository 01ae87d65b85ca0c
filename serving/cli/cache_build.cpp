// `kiln cache build`: compiles every kernel a model can ask for on one target, for every M-window of its tune
// DB (or the heuristics' window without one), in parallel, into a prebuilt cache file (.kcache). It needs
// no GPU: NVRTC builds cubins for any arch on a CPU-only machine. The kernels are compiled into a private
// user layer first and the file is published by Store::export_layer (a temporary file renamed into place),
// so a failed or interrupted build never leaves a partial file behind.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/tuned_tables.hpp"
#include "cache/prebuilt_layer.hpp"
#include "cache/signing.hpp"
#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/nvrtc.hpp"
#include "model/tune/model_kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/exec_target.hpp"
#include "runtime/temp_dir.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/human_format.hpp"
#include "serving/cli/tune_source.hpp"

namespace kiln::cli {

namespace {

struct BuildArgs {
    TuneModelFlags model;
    std::string tune_db, arch, out, sign_key;
    int jobs = 0;
    bool json = false;
};

void cmd_build(const BuildArgs& a) {
    if (a.out.empty()) throw InvalidArgument("kiln cache build needs --out FILE (the prebuilt cache to write)");
    const model::ModelConfig config = tune_model_config(a.model);
    std::string arch = a.arch;
    if (arch.empty()) {
        std::string why;
        jit::Dispatcher probe;
        arch = runtime::exec_target(&why) == runtime::ExecTarget::host ? "host" : to_string(probe.device_target());
    }
    const jit::Target target = jit::parse_target(arch);
    if (!a.sign_key.empty()) cache::SigningKey::load_pem(a.sign_key);  // a bad key fails before any compile
    const autotune::TunedTables tables =
        a.tune_db.empty() ? autotune::TunedTables() : autotune::TunedTables::load_for_target(a.tune_db, arch);
    int max_tokens = a.model.max_tokens;
    if (max_tokens == 0 && !a.tune_db.empty()) {
        const std::string v = autotune::TuneDb::open_read(a.tune_db).meta("sweep.max_tokens");
        if (!v.empty()) max_tokens = std::stoi(v);
    }
    if (max_tokens == 0) max_tokens = target.is_host() ? 256 : 8192;
    const model::tune::ModelKernels mk = model::tune::model_kernels(config, tables, target, max_tokens, a.model.ep_size);

    TempDir scratch("kiln-cache-build");
    cache::StoreOptions so;
    so.cache_dir = scratch.path().string();
    so.max_bytes = uint64_t(1) << 40;
    cache::Store store(so);
    jit::DispatcherOptions dopt;
    dopt.store = &store;
    jit::Dispatcher disp(dopt);

    const int jobs = a.jobs ? a.jobs : std::max(1, std::min<int>(static_cast<int>(std::thread::hardware_concurrency()),
                                                                  jit::max_parallel_compiles()));
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> bytes{0};
    std::mutex err_mu;
    std::exception_ptr error;
    auto work = [&] {
        for (size_t i = next++; i < mk.kernels.size(); i = next++) {
            try {
                bytes += disp.build(mk.kernels[i]).bytes;
            } catch (...) {
                std::lock_guard<std::mutex> lock(err_mu);
                if (!error) error = std::current_exception();
                next = mk.kernels.size();
            }
        }
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < std::min<int>(jobs, static_cast<int>(mk.kernels.size())); ++i) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
    const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    store.flush();
    store.export_layer(a.out, a.sign_key);
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::error_code ec;
    const uint64_t file_bytes = std::filesystem::file_size(a.out, ec);
    const std::string signer =
        a.sign_key.empty() ? "" : cache::SigningKey::load_pem(a.sign_key).public_key().fingerprint();
    if (a.json) {
        fmt::print("{}\n", nlohmann::json{{"file", a.out},
                                          {"target", arch},
                                          {"kernels", mk.kernels.size()},
                                          {"compiles", disp.stats().compiles},
                                          {"windows", mk.windows},
                                          {"tuned_windows", mk.tuned_windows},
                                          {"max_tokens", max_tokens},
                                          {"jobs", jobs},
                                          {"kernel_bytes", bytes.load()},
                                          {"file_bytes", file_bytes},
                                          {"compile_seconds", compile_s},
                                          {"seconds", total_s},
                                          {"signer", signer}}
                                   .dump(2));
        return;
    }
    fmt::print("built {} kernels for {} ({} layer windows, {} from {}; up to {} tokens per call) with {} jobs in {:.1f} s\n",
               mk.kernels.size(), arch, mk.windows, mk.tuned_windows, a.tune_db.empty() ? "no tune DB" : a.tune_db,
               max_tokens, jobs, total_s);
    fmt::print("wrote {} ({} of kernels, {} on disk){}\n", a.out, human_bytes(bytes.load()), human_bytes(file_bytes),
               signer.empty() ? ", unsigned" : ", signed by " + signer);
}

}  // namespace

void add_cache_build_command(CLI::App& cache) {
    auto a = std::make_shared<BuildArgs>();
    CLI::App* c = cache.add_subcommand("build", "Compile every kernel a model needs on one target into a prebuilt cache file");
    c->fallthrough();
    add_tune_model_flags(*c, a->model, "largest tokens per call served (default: the tune DB's, else 8192; host 256)");
    c->add_option("--tune", a->tune_db, "tune DB whose M-windows choose the kernels (default: the heuristics)")
        ->envname("KILN_TUNE_DB");
    c->add_option("--arch", a->arch, "target to build for: sm_90a, ... or host (default: this machine's)")
        ->envname("KILN_CACHE_BUILD_ARCH");
    c->add_option("--out", a->out, "prebuilt cache file to write (.kcache)")->envname("KILN_CACHE_BUILD_OUT");
    c->add_option("--sign-key", a->sign_key, "Ed25519 private key (PEM) to sign the manifest with")->envname("KILN_SIGN_KEY");
    c->add_option("--jobs", a->jobs, "kernels compiled at once (default: cores, at most KILN_JIT_MAX_PARALLEL)")
        ->envname("KILN_CACHE_BUILD_JOBS")
        ->transform(in_range(1, 64));
    add_json_flag(*c, a->json, "Machine-readable summary");
    c->callback([a] { cmd_build(*a); });
}

}  // namespace kiln::cli
