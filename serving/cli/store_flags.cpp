#include "serving/cli/store_flags.hpp"

#include "runtime/error.hpp"
#include "serving/cli/flags.hpp"

namespace kiln::cli {

cache::StoreOptions StoreFlags::options() const {
    cache::StoreOptions o;
    o.cache_dir = cache_dir;
    for (const auto& item : kernel_cache)
        for (auto& p : cache::split_path_list(item)) o.prebuilt.push_back(p);
    for (const auto& item : trusted_keys)
        for (auto& p : cache::split_path_list(item)) o.trusted_keys.push_back(p);
    if (!max_size.empty()) {
        o.max_bytes = parse_size_flag("--cache-max-size", max_size);
        if (o.max_bytes == 0) throw InvalidArgument("--cache-max-size must be larger than 0");
    }
    o.read_only = read_only;
    o.require_signed = require_signed;
    return o;
}

void add_store_flags(CLI::App& cmd, StoreFlags& flags) {
    cmd.add_option("--cache-dir", flags.cache_dir,
                   "User kernel cache directory (default: $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)")
        ->envname("KILN_CACHE_DIR");
    cmd.add_option("--kernel-cache", flags.kernel_cache,
                   "Prebuilt kernel cache file (.kcache), searched before the user cache; repeatable, or a ':'/',' "
                   "separated list")
        ->envname("KILN_KERNEL_CACHE");
    cmd.add_option("--trusted-key", flags.trusted_keys,
                   "Ed25519 public key (PEM) trusted to sign prebuilt caches; repeatable, or a ':'/',' separated list")
        ->envname("KILN_TRUSTED_KEYS");
    cmd.add_flag("--require-signed", flags.require_signed,
                 "Refuse any prebuilt cache not signed by a --trusted-key (with no key given: every prebuilt cache)")
        ->envname("KILN_REQUIRE_SIGNED");
    cmd.add_option("--cache-max-size", flags.max_size, "Size cap of the user cache, LRU-pruned (default 10G)")
        ->envname("KILN_CACHE_MAX_SIZE");
    cmd.add_flag("--cache-read-only", flags.read_only, "Never write the user cache")->envname("KILN_CACHE_READ_ONLY");
}

}  // namespace kiln::cli
