// The flags of every command that opens the kernel cache (--cache-dir, --kernel-cache, --trusted-key,
// --require-signed, --cache-max-size, --cache-read-only), each with its KILN_* environment variable, and the
// cache::StoreOptions they make.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cache/store.hpp"

namespace kiln::cli {

struct StoreFlags {
    std::string cache_dir;                  // --cache-dir, KILN_CACHE_DIR
    std::vector<std::string> kernel_cache;  // --kernel-cache, KILN_KERNEL_CACHE (':' or ',' separated)
    std::vector<std::string> trusted_keys;  // --trusted-key, KILN_TRUSTED_KEYS (':' or ',' separated)
    bool require_signed = false;            // --require-signed, KILN_REQUIRE_SIGNED
    std::string max_size;                   // --cache-max-size, KILN_CACHE_MAX_SIZE
    bool read_only = false;                 // --cache-read-only, KILN_CACHE_READ_ONLY

    cache::StoreOptions options() const;  // throws InvalidArgument on a malformed size
};

// Adds the flags to `cmd`; `flags` must outlive parsing.
void add_store_flags(CLI::App& cmd, StoreFlags& flags);

}  // namespace kiln::cli
