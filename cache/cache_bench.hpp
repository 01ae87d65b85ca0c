// What `kiln bench cache` measures: the warm load of one blob (read + its check) from the SQLite user
// layer and from a signed prebuilt layer, for a few blob sizes, in a scratch directory; and the two
// digests alone (SHA-256, XXH3-128), the part of a load spent verifying. Numbers only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cache {

struct CacheBenchOptions {
    std::vector<uint64_t> sizes = {64ull << 10, 512ull << 10, 2ull << 20};  // blob bytes
    int iterations = 200;                                                    // timed loads per size and layer
    std::string dir;  // scratch directory; "" = a temporary one, removed afterwards
};

struct TimingSummary {
    double min_ms = 0, median_ms = 0, p90_ms = 0, mean_ms = 0;
};

struct CacheBenchRow {
    uint64_t bytes = 0;
    std::string layer;  // "user", "prebuilt", or the digest alone: "sha256", "xxh3"
    TimingSummary time;
};

struct CacheBenchResult {
    int iterations = 0;
    size_t prebuilt_entries = 0;
    double prebuilt_open_ms = 0;  // opening the prebuilt layer, manifest signature check included
    std::vector<CacheBenchRow> rows;  // per size: user, prebuilt, sha256, xxh3
};

// Throws InvalidArgument for no sizes or fewer than one iteration.
CacheBenchResult run_cache_bench(const CacheBenchOptions& options);

}  // namespace kiln::cache
