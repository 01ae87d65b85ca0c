#include "cache/cache_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/digest.hpp"
#include "cache/signing.hpp"
#include "cache/store.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchArgs {
    std::string sizes = "64K,512K,2M";
    int iterations = 200;
    std::string dir;
    bool json = false;
};

struct Summary {
    double min, median, p90, mean;
};

Summary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    return {v.front(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)], mean};
}

template <typename F>
Summary time_ms(int iterations, F&& f) {
    f();  // warm: page cache, statement cache, first-touch allocations
    std::vector<double> ms;
    ms.reserve(static_cast<size_t>(iterations));
    for (int i = 0; i < iterations; ++i) {
        auto t0 = Clock::now();
        f();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return summarize(std::move(ms));
}

void run_bench(const BenchArgs& args) {
    std::vector<uint64_t> sizes;
    for (const auto& s : split_path_list(args.sizes)) sizes.push_back(env::parse_size(s));
    if (sizes.empty()) throw InvalidArgument("--sizes: give at least one size");
    if (args.iterations < 1) throw InvalidArgument("--iterations must be at least 1");

    fs::path root = args.dir.empty() ? fs::temp_directory_path() / fmt::format("kiln-bench-cache-{}", getpid())
                                     : fs::path(args.dir);
    bool remove_root = args.dir.empty();
    fs::create_directories(root);
    struct Cleanup {
        fs::path p;
        bool on;
        ~Cleanup() {
            std::error_code ec;
            if (on) fs::remove_all(p, ec);
        }
    } cleanup{root, remove_root};

    std::mt19937_64 rng(12345);
    std::vector<ContentKey> keys;
    {
        StoreOptions o;
        o.cache_dir = (root / "user").string();
        o.max_bytes = 1ull << 40;
        Store user(o);
        for (uint64_t size : sizes) {
            Artifact a;
            a.blob.resize(size);
            for (auto& b : a.blob) b = static_cast<uint8_t>(rng());
            a.info.key = KeyBuilder().field("bench-blob-size", static_cast<int64_t>(size)).finish();
            a.info.family = "bench";
            a.info.mode = "blob";
            a.info.target = "sm_90a";
            a.info.kernel_name = "bench_kernel";
            a.info.compiler = "none";
            user.put(a);
            keys.push_back(a.info.key);
        }
        SigningKey key = SigningKey::generate();
        key.write_pair((root / "bench-sign.pem").string());
        user.export_layer((root / "bench.kcache").string(), (root / "bench-sign.pem").string());
    }

    StoreOptions uo;
    uo.cache_dir = (root / "user").string();
    uo.max_bytes = 1ull << 40;
    Store user(uo);

    StoreOptions po;
    po.cache_dir = (root / "empty-user").string();
    po.prebuilt = {(root / "bench.kcache").string()};
    po.trusted_keys = {(root / "bench-sign.pem.pub").string()};
    po.read_only = true;
    auto t_open = Clock::now();
    Store prebuilt(po);
    double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_open).count();

    nlohmann::json rows = nlohmann::json::array();
    if (!args.json) {
        fmt::print("warm load of one blob incl. its check (user: XXH3-128, prebuilt: SHA-256 against the signed "
                   "manifest), {} iterations each (ms)\n",
                   args.iterations);
        fmt::print("prebuilt layer open (manifest signature check, {} entries): {:.3f} ms\n\n", keys.size(), open_ms);
        fmt::print("{:>8}  {:<9}  {:>8}  {:>8}  {:>8}  {:>8}\n", "blob", "layer", "min", "median", "p90", "mean");
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
        const ContentKey key = keys[i];
        auto load = [&](Store& s) {
            auto a = s.get(key, ArtifactKind::cubin);
            if (!a || a->blob.size() != sizes[i]) throw CacheError("bench: lost its own artifact");
        };
        Summary u = time_ms(args.iterations, [&] { load(user); });
        Summary p = time_ms(args.iterations, [&] { load(prebuilt); });
        std::vector<uint8_t> blob(sizes[i], 7);
        Summary h = time_ms(args.iterations, [&] { (void)sha256_hex(blob); });
        Summary x = time_ms(args.iterations, [&] { (void)xxh3_128_hex(blob); });
        for (auto [name, s] : {std::pair{"user", u}, std::pair{"prebuilt", p}, std::pair{"sha256", h},
                               std::pair{"xxh3", x}}) {
            rows.push_back({{"bytes", sizes[i]},
                            {"layer", name},
                            {"min_ms", s.min},
                            {"median_ms", s.median},
                            {"p90_ms", s.p90},
                            {"mean_ms", s.mean}});
            if (!args.json)
                fmt::print("{:>8}  {:<9}  {:>8.3f}  {:>8.3f}  {:>8.3f}  {:>8.3f}\n",
                           fmt::format("{}K", sizes[i] / 1024), name, s.min, s.median, s.p90, s.mean);
        }
    }
    if (args.json)
        fmt::print("{}\n", nlohmann::json{{"iterations", args.iterations}, {"prebuilt_open_ms", open_ms}, {"results", rows}}
                               .dump(2));
    else
        fmt::print("\n('sha256' and 'xxh3' time the digest alone: the part of a load spent verifying the blob)\n");
}

}  // namespace

void add_cache_bench(CLI::App& bench) {
    auto args = std::make_shared<BenchArgs>();
    CLI::App* c = bench.add_subcommand("cache", "Warm kernel load from the SQLite user cache and a prebuilt cache");
    c->add_option("--sizes", args->sizes, "Blob sizes, comma separated")->capture_default_str()->envname("KILN_BENCH_CACHE_SIZES");
    c->add_option("--iterations", args->iterations, "Loads timed per size and layer")->capture_default_str()
        ->envname("KILN_BENCH_CACHE_ITERATIONS");
    c->add_option("--dir", args->dir, "Scratch directory (default: a temporary one, removed afterwards)")
        ->envname("KILN_BENCH_CACHE_DIR");
    c->add_flag("--json", args->json, "Machine-readable output")->envname("KILN_JSON");
    c->callback([args] { run_bench(*args); });
}

}  // namespace kiln::cache
