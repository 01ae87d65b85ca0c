#include "cache/cache_bench.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>

#include "cache/digest.hpp"
#include "cache/signing.hpp"
#include "cache/store.hpp"
#include "runtime/error.hpp"
#include "runtime/temp_dir.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

TimingSummary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    return {v.front(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)], mean};
}

template <typename F>
TimingSummary time_ms(int iterations, F&& f) {
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

}  // namespace

CacheBenchResult run_cache_bench(const CacheBenchOptions& args) {
    const std::vector<uint64_t>& sizes = args.sizes;
    if (sizes.empty()) throw InvalidArgument("cache bench: give at least one blob size");
    if (args.iterations < 1) throw InvalidArgument("cache bench: iterations must be at least 1");

    std::optional<TempDir> scratch;
    if (args.dir.empty()) scratch.emplace("kiln-bench-cache");
    const fs::path root = scratch ? scratch->path() : fs::path(args.dir);
    fs::create_directories(root);

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

    CacheBenchResult out;
    out.iterations = args.iterations;
    out.prebuilt_open_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_open).count();
    out.prebuilt_entries = keys.size();
    for (size_t i = 0; i < sizes.size(); ++i) {
        const ContentKey key = keys[i];
        auto load = [&](Store& s) {
            auto a = s.get(key, ArtifactKind::cubin);
            if (!a || a->blob.size() != sizes[i]) throw CacheError("bench: lost its own artifact");
        };
        TimingSummary u = time_ms(args.iterations, [&] { load(user); });
        TimingSummary p = time_ms(args.iterations, [&] { load(prebuilt); });
        std::vector<uint8_t> blob(sizes[i], 7);
        TimingSummary h = time_ms(args.iterations, [&] { (void)sha256_hex(blob); });
        TimingSummary x = time_ms(args.iterations, [&] { (void)xxh3_128_hex(blob); });
        for (auto [name, s] : {std::pair{"user", u}, std::pair{"prebuilt", p}, std::pair{"sha256", h},
                               std::pair{"xxh3", x}})
            out.rows.push_back({sizes[i], name, s});
    }
    return out;
}

}  // namespace kiln::cache
