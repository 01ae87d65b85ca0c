// `kiln cache ...`: inspect and maintain the kernel cache (ls, show, stats, verify, prune, clear,
// export, import, keygen), human tables by default and --json for machines. Also the flags every
// command that opens a Store shares (--cache-dir, --kernel-cache, --trusted-key, ...), each with
// its KILN_* environment variable.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cache/store.hpp"

namespace kiln::cache {

struct StoreFlags {
    std::string cache_dir;                  // --cache-dir, KILN_CACHE_DIR
    std::vector<std::string> kernel_cache;  // --kernel-cache, KILN_KERNEL_CACHE (':' or ',' separated)
    std::vector<std::string> trusted_keys;  // --trusted-key, KILN_TRUSTED_KEYS (':' or ',' separated)
    std::string max_size;                   // --cache-max-size, KILN_CACHE_MAX_SIZE
    bool read_only = false;                 // --cache-read-only, KILN_CACHE_READ_ONLY

    StoreOptions options() const;  // throws InvalidArgument on a malformed size
};

// Adds the shared Store flags to `cmd`; `flags` must outlive parsing.
void add_store_flags(CLI::App& cmd, StoreFlags& flags);

void add_cache_commands(CLI::App& app);

}  // namespace kiln::cache
