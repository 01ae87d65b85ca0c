// `kiln tune`: sweeps the model's tunable kernel families on this machine's target (the GPU, else the host)
// into a tune DB for its SKU (autotune/tune_db.hpp), with a progress bar and ETA on a terminal (plain lines
// otherwise), resumable after an interrupt (--resume). `kiln tune show DB` prints the DB's tables, or JSON;
// `--plot DIR` writes PNG plots with scripts/plot-tune.py.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "autotune/sku.hpp"
#include "autotune/sweep.hpp"
#include "autotune/tune_db.hpp"
#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "model/preset.hpp"
#include "model/tune/moe_w4a16_sweep.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/exec_target.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/flags.hpp"
#include "serving/cli/human_format.hpp"
#include "serving/cli/store_flags.hpp"
#include "serving/cli/tune_source.hpp"

namespace kiln::cli {

namespace fs = std::filesystem;
using nlohmann::json;

void add_tune_model_flags(CLI::App& cmd, TuneModelFlags& f, const std::string& max_tokens_help) {
    cmd.add_option("--model", f.model_dir, "checkpoint directory (its config.json gives the shapes)")->envname("KILN_MODEL");
    cmd.add_option("--preset", f.preset, "built-in model shapes instead of a directory (k3-tiny, k3-slice-tp8, k3)")
        ->envname("KILN_PRESET");
    cmd.add_option("--max-tokens", f.max_tokens, max_tokens_help)
        ->envname("KILN_MAX_TOKENS")
        ->transform(in_range(1, 1 << 20));
    cmd.add_option("--ep-size", f.ep_size, "expert-parallel ranks the model's experts are spread over (default 1)")
        ->envname("KILN_EP_SIZE")
        ->transform(in_range(1, 64));
}

model::ModelConfig tune_model_config(const TuneModelFlags& f) {
    if (!f.model_dir.empty() && !f.preset.empty()) throw InvalidArgument("give either --model or --preset, not both");
    if (!f.model_dir.empty()) return model::load_config(f.model_dir);
    if (!f.preset.empty()) return model::preset_config(f.preset);
    throw InvalidArgument("no model: give --model DIR or --preset NAME (e.g. --preset k3-tiny)");
}

json tune_db_json(const autotune::TuneDb& db) {
    const autotune::SkuIdentity& s = db.sku();
    json j;
    j["file"] = db.path();
    j["schema"] = autotune::k_tune_schema_version;
    j["kiln_version"] = db.meta("kiln_version");
    j["state"] = db.meta("sweep.state");
    j["points_total"] = db.meta("sweep.points_total");
    j["max_tokens"] = db.meta("sweep.max_tokens");
    j["sku"] = {{"kind", s.kind},          {"name", s.name},       {"compute_units", s.compute_units},
                {"memory_bytes", s.memory_bytes}, {"target", s.target}, {"clock_khz", s.clock_khz},
                {"cache_bytes", s.cache_bytes}, {"driver", s.driver}, {"nvrtc", s.nvrtc},
                {"llvm", s.llvm}};
    auto shape = [](const autotune::ShapeKey& k) {
        return json{{"family", k.family}, {"mode", k.mode}, {"n", k.n}, {"k", k.k}, {"e", k.e}, {"topk", k.topk},
                    {"variant", k.variant}, {"text", k.text()}};
    };
    j["measurements"] = json::array();
    for (const autotune::Measurement& m : db.measurements())
        j["measurements"].push_back({{"shape", shape(m.shape)}, {"m", m.m}, {"config", m.config}, {"block_m", m.block_m},
                                     {"schedule", m.schedule}, {"median_us", m.median_us}, {"min_us", m.min_us},
                                     {"max_us", m.max_us}, {"reps", m.reps}, {"bytes", m.bytes}});
    j["m_windows"] = json::array();
    for (const autotune::MWindow& w : db.m_windows())
        j["m_windows"].push_back({{"shape", shape(w.shape)}, {"m_lo", w.m_lo}, {"m_hi", w.m_hi}, {"bucket", w.bucket},
                                  {"config", w.config}, {"block_m", w.block_m}, {"schedule", w.schedule}, {"us", w.us}});
    j["toke_windows"] = json::array();
    for (const autotune::TokeWindow& w : db.toke_windows())
        j["toke_windows"].push_back({{"shape", shape(w.shape)}, {"tok_lo", w.tok_lo}, {"tok_hi", w.tok_hi},
                                     {"block_m", w.block_m}, {"schedule", w.schedule}, {"config", w.config}});
    if (const auto vc = db.verify_cost()) {
        json cells = json::array();
        for (size_t r = 0; r < vc->requests.size(); ++r)
            for (size_t c = 0; c < vc->tokens.size(); ++c)
                cells.push_back({{"requests", vc->requests[r]}, {"tokens", vc->tokens[c]},
                                 {"measured_ms", vc->measured(r, c)}, {"ms", vc->at(r, c)}});
        j["verify_cost"] = {{"requests", vc->requests}, {"tokens", vc->tokens}, {"cells", cells}};
    } else {
        j["verify_cost"] = nullptr;
    }
    return j;
}

namespace {

struct TuneArgs {
    TuneModelFlags model;
    StoreFlags store;
    std::string out;
    std::vector<std::string> families;
    bool resume = false;
    int reps = 15, warmup = 3;
    double tolerance = 0.03;
    // show
    std::string show_db, plot_dir;
    bool json = false;
};

std::string clock_text(double s) {
    if (s < 0) return "--:--";
    const auto t = static_cast<int64_t>(s + 0.5);
    return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

// A bar redrawn in place on a terminal; a line per point otherwise.
class ProgressView {
public:
    ProgressView() : tty_(::isatty(STDERR_FILENO) == 1) {}
    ~ProgressView() { finish(); }
    void operator()(const autotune::SweepProgress& p) {
        const double frac = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
        if (tty_) {
            constexpr int width = 30;
            const int full = static_cast<int>(frac * width);
            std::string point = p.point.size() > 60 ? p.point.substr(0, 57) + "..." : p.point;
            std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %3.0f%% %s ETA %s  %s", std::string(full, '#').c_str(),
                         std::string(width - full, '.').c_str(), p.done, p.total, 100 * frac,
                         clock_text(p.elapsed_s).c_str(), clock_text(p.eta_s).c_str(), point.c_str());
            drawn_ = true;
        } else {
            std::fprintf(stderr, "tune: %zu/%zu (%.0f%%) elapsed %s, ETA %s%s: %s\n", p.done, p.total, 100 * frac,
                         clock_text(p.elapsed_s).c_str(), clock_text(p.eta_s).c_str(), p.done <= p.resumed ? " (resumed)" : "",
                         p.point.c_str());
        }
        std::fflush(stderr);
    }
    void finish() {
        if (drawn_) std::fputs("\n", stderr);
        drawn_ = false;
    }

private:
    bool tty_;
    bool drawn_ = false;
};

void print_windows(const json& j) {
    std::string last;
    for (const json& w : j["m_windows"]) {
        const std::string shape = w["shape"]["text"];
        if (shape != last) {
            if (!last.empty()) fmt::print("\n");
            fmt::print("{}\n", shape);
            last = shape;
            std::vector<std::vector<std::string>> rows;
            for (const json& x : j["m_windows"]) {
                if (x["shape"]["text"] != shape) continue;
                rows.push_back({fmt::format("{}..{}", x["m_lo"].get<int64_t>(), x["m_hi"].get<int64_t>()),
                                std::to_string(x["bucket"].get<int64_t>()), std::to_string(x["block_m"].get<int>()),
                                x["schedule"], fmt::format("{:.1f}", x["us"].get<double>()), x["config"]});
            }
            for (size_t i = 0; i < rows.size(); ++i) {
                const json* t = nullptr;
                size_t n = 0;
                for (const json& x : j["toke_windows"])
                    if (x["shape"]["text"] == shape && n++ == i) t = &x;
                rows[i].insert(rows[i].begin() + 1, t ? fmt::format("{:.3g}..{:.3g}", (*t)["tok_lo"].get<double>(),
                                                                      (*t)["tok_hi"].get<double>())
                                                      : "-");
            }
            print_table({"M", "tok/expert", "bucket", "block_m", "schedule", "us", "config"}, rows,
                        {true, true, true, true, false, true, false});
        }
    }
    if (last.empty()) fmt::print("no windows (the sweep has not finished: kiln tune --resume)\n");
}

void print_best(const json& j) {
    // per shape and M: the fastest candidate and how many were measured
    struct Best {
        double us = 0;
        std::string config, schedule;
        int count = 0;
    };
    std::map<std::pair<std::string, int64_t>, Best> best;
    for (const json& m : j["measurements"]) {
        Best& b = best[{m["shape"]["text"].get<std::string>(), m["m"].get<int64_t>()}];
        const double us = m["median_us"];
        if (b.count++ == 0 || us < b.us) b.us = us, b.config = m["config"], b.schedule = m["schedule"];
    }
    std::string last;
    std::vector<std::vector<std::string>> rows;
    auto flush = [&] {
        if (!rows.empty()) print_table({"M", "candidates", "best us", "schedule", "best config"}, rows, {true, true, true, false, false});
        rows.clear();
    };
    for (const auto& [key, b] : best) {
        if (key.first != last) {
            flush();
            fmt::print("\nmeasured: {}\n", key.first);
            last = key.first;
        }
        rows.push_back({std::to_string(key.second), std::to_string(b.count), fmt::format("{:.1f}", b.us), b.schedule, b.config});
    }
    flush();
}

void print_verify_cost(const json& j) {
    const json& vc = j["verify_cost"];
    if (vc.is_null()) {
        fmt::print("\nverify_cost: not measured\n");
        return;
    }
    fmt::print("\nverify_cost ms (monotone; measured in parentheses), rows: requests, columns: tokens per request\n");
    std::vector<std::string> header = {"requests"};
    for (const json& t : vc["tokens"]) header.push_back(std::to_string(t.get<int>()));
    std::vector<std::vector<std::string>> rows;
    const size_t cols = vc["tokens"].size();
    size_t i = 0;
    for (const json& r : vc["requests"]) {
        std::vector<std::string> row = {std::to_string(r.get<int>())};
        for (size_t c = 0; c < cols; ++c, ++i) {
            const json& cell = vc["cells"][i];
            row.push_back(fmt::format("{:.3f} ({:.3f})", cell["ms"].get<double>(), cell["measured_ms"].get<double>()));
        }
        rows.push_back(std::move(row));
    }
    print_table(header, rows, std::vector<bool>(header.size(), true));
}

void print_db(const json& j) {
    const json& s = j["sku"];
    const std::string total = j["points_total"];
    fmt::print("tune DB  {} (schema {}, kiln {}, sweep {}, {} of {} points measured)\n", j["file"].get<std::string>(),
               j["schema"].get<int>(), j["kiln_version"].get<std::string>(),
               j["state"].get<std::string>().empty() ? "not started" : j["state"].get<std::string>(), j["measurements"].size(),
               total.empty() ? "?" : total);
    fmt::print("SKU      {} {}, {} {}, {} memory, {}\n", s["kind"].get<std::string>(), s["name"].get<std::string>(),
               s["compute_units"].get<int>(), s["kind"] == "cuda" ? "SMs" : "threads", human_bytes(s["memory_bytes"].get<uint64_t>()),
               s["target"].get<std::string>());
    auto or_dash = [](const json& v) { return v.get<std::string>().empty() ? std::string("-") : v.get<std::string>(); };
    const int mhz = s["clock_khz"].get<int>() / 1000;
    fmt::print("recorded clock {}, cache {}, driver {}, NVRTC {}, LLVM {}\n\n", mhz ? fmt::format("{} MHz", mhz) : "-",
               human_bytes(s["cache_bytes"].get<uint64_t>()), or_dash(s["driver"]), or_dash(s["nvrtc"]), or_dash(s["llvm"]));
    print_windows(j);
    print_best(j);
    print_verify_cost(j);
}

// scripts/plot-tune.py next to the executable, in ../share/kiln, or in the source tree this kiln was built from.
std::string plot_script() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    std::vector<fs::path> candidates;
    if (!ec) {
        candidates.push_back(exe.parent_path() / "plot-tune.py");
        candidates.push_back(exe.parent_path().parent_path() / "share" / "kiln" / "plot-tune.py");
    }
#ifdef KILN_SCRIPTS_DIR
    candidates.push_back(fs::path(KILN_SCRIPTS_DIR) / "plot-tune.py");
#endif
    for (const fs::path& p : candidates)
        if (fs::is_regular_file(p, ec)) return p.string();
    throw NotFound("scripts/plot-tune.py not found (next to kiln, in ../share/kiln, or in the source tree)");
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

void write_plots(const json& j, const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw IoError(fmt::format("--plot {}: {}", dir, ec.message()));
    const std::string data = (fs::path(dir) / "tune.json").string();
    write_file_atomic(data, j.dump(1) + "\n");
    const std::string script = plot_script();
    const fs::path venv = fs::path(script).parent_path().parent_path() / ".venv" / "bin" / "python3";
    const std::string python = fs::is_regular_file(venv, ec) ? venv.string() : "python3";
    const std::string cmd = fmt::format("{} {} {} {}", shell_quote(python), shell_quote(script), shell_quote(data), shell_quote(dir));
    const int rc = std::system(cmd.c_str());
    if (rc != 0)
        throw Error(fmt::format("--plot: {} failed (exit status {}; scripts/setup installs matplotlib into .venv)", script,
                                WIFEXITED(rc) ? WEXITSTATUS(rc) : -1));
}

void cmd_show(const TuneArgs& a) {
    const autotune::TuneDb db = autotune::TuneDb::open_read(a.show_db);
    const json j = tune_db_json(db);
    if (a.json) fmt::print("{}\n", j.dump(2));
    else print_db(j);
    if (!a.plot_dir.empty()) {
        write_plots(j, a.plot_dir);
        if (!a.json) fmt::print("\nplots written to {}\n", a.plot_dir);
    }
}

void cmd_tune(const TuneArgs& a) {
    if (a.out.empty()) throw InvalidArgument("kiln tune needs --out FILE (the tune DB to write, e.g. h200.tune.db)");
    const model::ModelConfig config = tune_model_config(a.model);
    std::string why;
    const runtime::ExecTarget where = runtime::exec_target(&why);
    std::unique_ptr<runtime::Backend> backend = runtime::make_backend(where);
    backend->make_current();
    const autotune::SkuIdentity sku = autotune::detect_sku(*backend);
    const bool host = where == runtime::ExecTarget::host;

    cache::Store store(a.store.options());
    jit::DispatcherOptions dopt;
    dopt.store = &store;
    jit::Dispatcher disp(dopt);

    model::tune::MoeSweepOptions mo;
    mo.max_tokens = a.model.max_tokens ? a.model.max_tokens : host ? 256 : 8192;
    // the cases first: an unknown family or a model with nothing to tune leaves no file behind
    const std::vector<autotune::SweepCase> cases =
        model::tune::model_sweep_cases(config, a.families, disp, *backend, sku, mo, a.model.ep_size);
    std::error_code ec;
    const bool exists = fs::exists(a.out, ec);
    autotune::TuneDb db = a.resume && exists ? autotune::TuneDb::resume(a.out, sku) : autotune::TuneDb::create(a.out, sku);
    const std::string recorded = db.meta("sweep.max_tokens");
    if (!recorded.empty() && recorded != std::to_string(mo.max_tokens))
        throw InvalidArgument(fmt::format("{} was swept up to --max-tokens {}; resume it with the same value", a.out, recorded));
    db.set_meta("sweep.max_tokens", std::to_string(mo.max_tokens));
    db.set_meta("sweep.ep_size", std::to_string(a.model.ep_size));

    fmt::print(stderr, "kiln tune: {} on {} ({}), {} shape{}, up to {} tokens per call{}\n",
               a.model.model_dir.empty() ? a.model.preset : a.model.model_dir, sku.summary(), why, cases.size(),
               cases.size() == 1 ? "" : "s", mo.max_tokens, a.resume && exists ? ", resuming" : "");
    autotune::SweepOptions so;
    so.reps = a.reps;
    so.warmup = a.warmup;
    so.tolerance = a.tolerance;
    ProgressView view;
    const autotune::SweepSummary s = autotune::run_sweep(db, *backend, cases, so, [&](const autotune::SweepProgress& p) { view(p); });
    view.finish();
    fmt::print(stderr, "kiln tune: {} points measured, {} resumed, {} not applicable; {} windows\n", s.measured, s.resumed,
               s.unsupported, s.windows.size());
    store.flush();
    print_windows(tune_db_json(db));
    fmt::print("\nwrote {}\n", a.out);
}

}  // namespace

void add_tune_command(CLI::App& app) {
    auto a = std::make_shared<TuneArgs>();
    CLI::App* c = app.add_subcommand("tune", "Sweep kernel configs on this machine into a tune DB for its SKU");
    c->require_subcommand(0, 1);
    c->fallthrough();
    add_tune_model_flags(*c, a->model, "largest tokens per call swept (default: 8192 on a GPU, 256 on the host)");
    add_store_flags(*c, a->store);
    c->add_option("--out", a->out, "tune DB to write (one per GPU SKU), e.g. h200.tune.db")->envname("KILN_TUNE_OUT");
    c->add_option("--families", a->families, "families to sweep, comma separated (default: all tunable ones)")
        ->envname("KILN_TUNE_FAMILIES")
        ->delimiter(',');
    c->add_flag("--resume", a->resume, "continue an interrupted sweep of --out (its finished points are kept)")
        ->envname("KILN_TUNE_RESUME");
    c->add_option("--reps", a->reps, "timed calls per point (their median is kept; default 15)")
        ->envname("KILN_TUNE_REPS")
        ->transform(in_range(1, 100000));
    c->add_option("--warmup", a->warmup, "untimed calls before each point (default 3)")
        ->envname("KILN_TUNE_WARMUP")
        ->transform(in_range(0, 100000));
    c->add_option("--tolerance", a->tolerance, "window fitting: configs within this fraction of the fastest tie (default 0.03)")
        ->envname("KILN_TUNE_TOLERANCE")
        ->transform(in_range(0.0, 1.0));
    CLI::App* show = c->add_subcommand("show", "Print a tune DB's SKU, windows, measurements and verify_cost table");
    show->fallthrough();
    show->add_option("db", a->show_db, "tune DB file")->required();
    add_json_flag(*show, a->json, "the whole DB as JSON");
    show->add_option("--plot", a->plot_dir, "also write PNG plots into this directory (scripts/plot-tune.py)")
        ->envname("KILN_TUNE_PLOT");
    show->callback([a] { cmd_show(*a); });
    c->callback([a, show] {
        if (show->parsed()) return;
        cmd_tune(*a);
    });
}

}  // namespace kiln::cli
