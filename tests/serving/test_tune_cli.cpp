// `kiln tune`, `kiln tune show` and `kiln cache build` as a user runs them, on the host target with the
// k3-tiny preset: the DB they write, resume after a killed run, SKU refusal, flag errors, and that a
// dispatch over the model's shapes with the prebuilt cache `kiln cache build` wrote compiles nothing (host
// objects, signed) and finds every kernel (sm_90a cubins, built here without a GPU).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/sku.hpp"
#include "autotune/tune_db.hpp"
#include "autotune/tuned_tables.hpp"
#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "kiln_config.h"
#include "model/layers/moe_w4a16_windowed.hpp"
#include "model/preset.hpp"
#include "model/tune/model_kernels.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/host/stream.hpp"
#include "tests/common/cli_runner.hpp"

using kiln::test::CliResult;
using kiln::test::Sandbox;
using kiln::test::run_kiln;
using kiln::test::shell_quote;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A quick sweep: 5 sizes x 7 host candidates.
const std::string k_quick = "--preset k3-tiny --max-tokens 16 --reps 3 --warmup 1";

std::string q(const fs::path& p) { return shell_quote(p.string()); }

size_t measurements(const fs::path& db) {
    if (!fs::exists(db)) return 0;
    try {
        return kiln::autotune::TuneDb::open_read(db.string()).measurements().size();
    } catch (const kiln::Error&) {
        return 0;  // not created yet
    }
}

}  // namespace

#if KILN_HAVE_HOST_JIT

TEST_CASE("kiln tune writes a DB for this SKU; tune show prints it; a finished DB resumes with nothing to do") {
    Sandbox sb("tune-cli");
    const fs::path db = sb.dir.path / "host.tune.db";
    CliResult r = run_kiln(sb, "tune " + k_quick + " --out " + q(db));
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(r.out.find("moe_w4a16/layer n=128 k=96 e=16 topk=4") != std::string::npos);
    CHECK(r.err.find("tune: 35/35 (100%)") != std::string::npos);  // plain lines: stderr is not a terminal

    const auto t = kiln::autotune::TuneDb::open_read(db.string());
    CHECK(t.sku().kind == "host");
    CHECK(t.meta("sweep.state") == "complete");
    CHECK(t.measurements().size() == 35);
    const auto w = t.m_windows();
    REQUIRE_FALSE(w.empty());
    CHECK(w.front().m_lo == 1);
    CHECK(w.back().m_hi == 16);
    for (size_t i = 1; i < w.size(); ++i) CHECK(w[i].m_lo == w[i - 1].m_hi + 1);
    CHECK(t.toke_windows().size() == w.size());

    CliResult show = run_kiln(sb, "tune show " + q(db));
    REQUIRE_MESSAGE(show.rc == 0, show.err);
    CHECK(show.out.find("sweep complete, 35 of 35 points") != std::string::npos);
    CHECK(show.out.find("tok/expert") != std::string::npos);
    CHECK(show.out.find("verify_cost: not measured") != std::string::npos);
    CliResult js = run_kiln(sb, "tune show --json " + q(db));
    REQUIRE(js.rc == 0);
    const json j = json::parse(js.out);
    CHECK(j["measurements"].size() == 35);
    CHECK(j["m_windows"].size() == w.size());
    CHECK(j["sku"]["kind"] == "host");

    CliResult again = run_kiln(sb, "tune " + k_quick + " --out " + q(db) + " --resume");
    REQUIRE_MESSAGE(again.rc == 0, again.err);
    CHECK(again.err.find("0 points measured, 35 resumed") != std::string::npos);

    CliResult info = run_kiln(sb, "info --tune " + q(db));
    REQUIRE(info.rc == 0);
    CHECK(info.out.find("tuning       tuned: ") != std::string::npos);
    CHECK(run_kiln(sb, "info").out.find("tuning       heuristics") != std::string::npos);
}

TEST_CASE("a killed kiln tune resumes from its finished points") {
    Sandbox sb("tune-cli");
    const fs::path db = sb.dir.path / "killed.tune.db";
    // many repetitions make each point slow enough to kill the run in the middle
    const std::string args = "tune --preset k3-tiny --max-tokens 16 --reps 400 --warmup 1 --out " + q(db);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const std::string cmd = "exec " + kiln::test::kiln_command(sb, args) + " >/dev/null 2>&1";
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (measurements(db) < 3 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    const size_t kept = measurements(db);
    REQUIRE(kept >= 3);
    REQUIRE(kept < 35);

    CliResult no_resume = run_kiln(sb, "tune " + k_quick + " --out " + q(db));
    CHECK(no_resume.rc == 1);
    CHECK(no_resume.err.find("exists (continue it with --resume") != std::string::npos);
    CliResult other_m = run_kiln(sb, "tune --preset k3-tiny --max-tokens 32 --reps 3 --out " + q(db) + " --resume");
    CHECK(other_m.rc == 1);
    CHECK(other_m.err.find("resume it with the same value") != std::string::npos);

    CliResult r = run_kiln(sb, "tune " + k_quick + " --out " + q(db) + " --resume");
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(r.err.find(fmt::format("{} points measured, {} resumed", 35 - kept, kept)) != std::string::npos);
    CHECK(measurements(db) == 35);
    CHECK(kiln::autotune::TuneDb::open_read(db.string()).meta("sweep.state") == "complete");
}

TEST_CASE("kiln tune refuses another SKU's DB, bad flags and unknown families in the one error format") {
    Sandbox sb("tune-cli");
    const fs::path db = sb.dir.path / "t.tune.db";
    REQUIRE(run_kiln(sb, "tune --preset k3-tiny --max-tokens 2 --reps 1 --warmup 0 --out " + q(db)).rc == 0);
    const int threads = kiln::runtime::HostBackend().compute_units();
    const std::string other = fmt::format("KILN_HOST_THREADS={}", threads + 1);
    CliResult sku = run_kiln(sb, "tune --preset k3-tiny --max-tokens 2 --out " + q(db) + " --resume", other);
    CHECK(sku.rc == 1);
    CHECK(sku.err.rfind("kiln: error: ", 0) == 0);
    CHECK(sku.err.find("tuned on another SKU") != std::string::npos);
    CHECK(sku.err.find(fmt::format("worker threads {} vs {}", threads, threads + 1)) != std::string::npos);
    CHECK(run_kiln(sb, "info --tune " + q(db), other).out.find("tune DB refused") != std::string::npos);

    const std::string x = q(sb.dir.path / "x.db"), y = q(sb.dir.path / "y.kcache");
    struct Bad {
        std::string args, message;
    } bad[] = {
        {"tune --preset k3-tiny", "kiln tune needs --out FILE"},
        {"tune --out " + x, "no model: give --model DIR or --preset NAME"},
        {"tune --preset k3-tiny --out " + x + " --reps 0", "--reps: 0 is out of range [1, 100000]"},
        {"tune --preset k3-tiny --out " + x + " --max-tokens 0", "--max-tokens: 0 is out of range [1, 1048576]"},
        {"tune --preset k3-tiny --out " + x + " --tolerance 2", "--tolerance: 2 is out of range"},
        {"tune --preset k3-tiny --out " + x + " --families moe_w4a16,nope", "unknown family 'nope' to tune (tunable: moe_w4a16)"},
        {"tune --preset nope --out " + x, "unknown preset"},
        {"tune show " + q(sb.dir.path / "missing.db"), "does not exist"},
        {"cache build --preset k3-tiny --arch host --out " + y + " --jobs 99", "--jobs: 99 is out of range [1, 64]"},
        {"cache build --preset k3-tiny --arch host", "kiln cache build needs --out FILE"},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.args);
        CliResult r = run_kiln(sb, b.args);
        CHECK(r.rc == 1);
        CHECK(r.err.rfind("kiln: error: ", 0) == 0);
        CHECK(r.err.find(b.message) != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
    CliResult env = run_kiln(sb, "tune --preset k3-tiny --out " + x, "KILN_TUNE_REPS=0");
    CHECK(env.rc == 1);
    CHECK(env.err.find("--reps: 0 is out of range") != std::string::npos);
    CHECK_FALSE(fs::exists(sb.dir.path / "x.db"));
}

TEST_CASE("kiln tune show --plot writes PNGs when matplotlib is installed") {
    const char* root = std::getenv("KILN_TEST_SOURCE_ROOT");
    REQUIRE(root != nullptr);
    const fs::path python = fs::path(root) / ".venv" / "bin" / "python3";
    if (!fs::exists(python) ||
        std::system((shell_quote(python.string()) + " -c 'import matplotlib' 2>/dev/null").c_str()) != 0) {
        MESSAGE("skipped: no matplotlib in .venv (scripts/setup installs it)");
        return;
    }
    Sandbox sb("tune-plot");
    const fs::path db = sb.dir.path / "t.tune.db";
    REQUIRE(run_kiln(sb, "tune --preset k3-tiny --max-tokens 4 --reps 2 --warmup 0 --out " + q(db)).rc == 0);
    {
        auto w = kiln::autotune::TuneDb::resume(db.string(), kiln::autotune::TuneDb::open_read(db.string()).sku());
        kiln::autotune::VerifyCostTable t;
        t.requests = {1, 4};
        t.tokens = {1, 2, 4};
        t.measured_ms = {1, 1, 2, 2, 2.5, 3};
        kiln::autotune::force_monotone(t);
        w.put_verify_cost(t);
    }
    const fs::path out = sb.dir.path / "plots";
    CliResult r = run_kiln(sb, "tune show " + q(db) + " --plot " + q(out));
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    int pngs = 0;
    for (const auto& e : fs::directory_iterator(out)) pngs += e.path().extension() == ".png" && fs::file_size(e.path()) > 1000;
    CHECK(pngs == 3);  // the configs, the tok_e windows, the staircase
    CHECK(fs::exists(out / "verify_cost.png"));
    CHECK(r.out.find("1.000 (1.000)") != std::string::npos);  // the staircase table
}

TEST_CASE("a dispatch over k3-tiny's shapes with the cache kiln cache build wrote compiles nothing") {
    Sandbox sb("cache-build");
    const fs::path db = sb.dir.path / "host.tune.db", key = sb.dir.path / "key.pem", out = sb.dir.path / "tiny.kcache";
    REQUIRE(run_kiln(sb, "tune " + k_quick + " --out " + q(db)).rc == 0);
    REQUIRE(run_kiln(sb, "cache keygen --out " + q(key)).rc == 0);
    CliResult b = run_kiln(sb, "cache build --preset k3-tiny --arch host --json --tune " + q(db) + " --out " + q(out) +
                                   " --sign-key " + q(key));
    REQUIRE_MESSAGE(b.rc == 0, b.err);
    const json summary = json::parse(b.out);
    CHECK(summary["max_tokens"] == 16);  // the DB's
    CHECK(summary["tuned_windows"] == summary["windows"]);
    CHECK(summary["kernels"].get<size_t>() == summary["compiles"].get<size_t>());
    CHECK(summary["signer"].get<std::string>().size() == 16);
    for (const auto& e : fs::directory_iterator(sb.dir.path))  // published whole: no temporary left beside it
        CHECK(e.path().filename().string().find(".tmp") == std::string::npos);

    namespace at = kiln::autotune;
    kiln::runtime::HostBackend backend;
    const at::TunedTables tables = at::TunedTables::load(db.string(), at::host_sku(backend.compute_units()));
    const kiln::model::ModelConfig config = kiln::model::preset_config("k3-tiny");
    const auto shapes = kiln::model::tune::moe_layer_shapes(config, 1);
    REQUIRE(shapes.size() == 1);
    const auto& s = shapes[0];
    // every layer of every window, for both MXFP4 scale paths, and a call of every size on each
    auto dispatch_all = [&](kiln::jit::Dispatcher& disp) {
        for (bool wide : {false, true}) {
            namespace w = kiln::model::weights;
            const auto gu = w::moe_weights_layout(s.format, w::W4Layout::decode_mma16, true, s.experts, s.intermediate,
                                                  s.hidden, wide);
            const auto dn = w::moe_weights_layout(s.format, w::W4Layout::decode_mma16, false, s.experts, s.hidden,
                                                  s.intermediate, wide);
            kiln::model::layers::MoeW4A16Shape ls;
            ls.act = s.act;
            ls.topk = s.topk;
            ls.max_tokens = 16;
            kiln::model::layers::MoeW4A16Windowed layers(disp, backend, gu, dn, ls, tables);
            CHECK(layers.tuned());
            CHECK(layers.windows() == tables.windows(layers.key()).size());
            kiln::runtime::Buffer wgu = backend.alloc(gu.expert_stride * gu.experts);
            kiln::runtime::Buffer wdn = backend.alloc(dn.expert_stride * dn.experts);
            auto stream = backend.create_stream();
            stream->fill_u8(wgu.addr(), 0x11, wgu.size());
            stream->fill_u8(wdn.addr(), 0x11, wdn.size());
            for (int m = 1; m <= 16; ++m) {
                std::vector<int32_t> ids(static_cast<size_t>(m) * s.topk);
                for (int t = 0; t < m; ++t)  // distinct experts per token
                    for (int j = 0; j < s.topk; ++j) ids[static_cast<size_t>(t) * s.topk + j] = (t + j * 3) % s.experts;
                std::vector<float> wts(ids.size(), 0.25f);
                std::vector<uint16_t> x(static_cast<size_t>(m) * s.hidden, 0x3f80);
                auto bx = kiln::runtime::upload_buffer(backend, x.data(), x.size() * 2);
                auto bi = kiln::runtime::upload_buffer(backend, ids.data(), ids.size() * 4);
                auto bw = kiln::runtime::upload_buffer(backend, wts.data(), wts.size() * 4);
                auto bo = backend.alloc(x.size() * 2);
                kiln::model::layers::MoeW4A16& layer = layers.layer(m);
                layer.run(layer.plan(m),
                          {wgu.addr(), wdn.addr(), bx.view(kiln::runtime::DType::bf16, {m, s.hidden}),
                           bi.view(kiln::runtime::DType::i32, {m, s.topk}), bw.view(kiln::runtime::DType::f32, {m, s.topk}),
                           bo.view(kiln::runtime::DType::bf16, {m, s.hidden})},
                          *stream);
                stream->synchronize();
            }
        }
    };

    {
        kiln::cache::StoreOptions so;
        so.cache_dir = (sb.dir.path / "fresh-user-cache").string();
        so.prebuilt = {out.string()};
        so.trusted_keys = {key.string() + ".pub"};
        kiln::cache::Store store(so);
        kiln::jit::DispatcherOptions o;
        o.store = &store;
        kiln::jit::Dispatcher disp(o);
        dispatch_all(disp);
        CHECK(disp.stats().compiles == 0);
        CHECK(disp.stats().store_hits == summary["kernels"].get<uint64_t>());
        CHECK(store.warnings().empty());
    }
    {  // the same dispatch without the prebuilt cache compiles: the count above is not vacuous
        kiln::cache::StoreOptions so;
        so.cache_dir = (sb.dir.path / "empty-user-cache").string();
        kiln::cache::Store store(so);
        kiln::jit::DispatcherOptions o;
        o.store = &store;
        kiln::jit::Dispatcher disp(o);
        dispatch_all(disp);
        CHECK(disp.stats().compiles == summary["kernels"].get<uint64_t>());
    }
}

#endif  // KILN_HAVE_HOST_JIT

TEST_CASE("kiln cache build for sm_90a on a machine without a GPU holds every kernel the model can ask for") {
    Sandbox sb("cache-build");
    const fs::path out = sb.dir.path / "tiny-sm90a.kcache";
    CliResult b = run_kiln(sb, "cache build --preset k3-tiny --arch sm_90a --max-tokens 512 --out " + q(out));
    REQUIRE_MESSAGE(b.rc == 0, b.err);
    CHECK(b.out.find("kernels for sm_90a (1 layer windows, 0 from no tune DB") != std::string::npos);

    const kiln::model::ModelConfig config = kiln::model::preset_config("k3-tiny");
    const auto mk = kiln::model::tune::model_kernels(config, kiln::autotune::TunedTables(), kiln::jit::Target::sm(90, 'a'),
                                                     512, 1);
    kiln::cache::StoreOptions so;
    so.cache_dir = (sb.dir.path / "fresh-user-cache").string();
    so.prebuilt = {out.string()};
    kiln::cache::Store store(so);
    CHECK(store.list().size() == mk.kernels.size());
    kiln::jit::DispatcherOptions o;
    o.store = &store;
    kiln::jit::Dispatcher disp(o);
    for (const kiln::jit::KernelDescriptor& d : mk.kernels) {
        const kiln::jit::BuildResult r = disp.build(d);
        CHECK(r.cache_hit);
        CHECK(r.layer == out.string());
    }
    CHECK(disp.stats().compiles == 0);

    // a DB of another target is refused, and a failed build leaves no file
#if KILN_HAVE_HOST_JIT
    const fs::path db = sb.dir.path / "host.tune.db";
    REQUIRE(run_kiln(sb, "tune --preset k3-tiny --max-tokens 2 --reps 1 --warmup 0 --out " + q(db)).rc == 0);
    const fs::path refused = sb.dir.path / "refused.kcache";
    CliResult r = run_kiln(sb, "cache build --preset k3-tiny --arch sm_90a --tune " + q(db) + " --out " + q(refused));
    CHECK(r.rc == 1);
    CHECK(r.err.find("not for sm_90a") != std::string::npos);
    CHECK_FALSE(fs::exists(refused));
#endif
    const fs::path nowhere = sb.dir.path / "no-such-dir" / "x.kcache";
    CliResult r2 = run_kiln(sb, "cache build --preset k3-tiny --arch host --max-tokens 1 --out " + q(nowhere));
    CHECK(r2.rc == 1);
    CHECK_FALSE(fs::exists(nowhere));
}
