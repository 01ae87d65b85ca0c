// `kiln bench cache`: warm load of one blob (read + SHA-256 check) from the SQLite user layer and
// from a signed prebuilt layer, for a few blob sizes, in a scratch directory.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cache {

// Adds the `cache` subcommand under `bench` (the `kiln bench` subcommand).
void add_cache_bench(CLI::App& bench);

}  // namespace kiln::cache
