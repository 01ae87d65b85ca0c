// The `kiln` executable: one CLI11 app; each layer contributes its own subcommands.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cache/cache_bench.hpp"
#include "cache/cache_cli.hpp"
#include "jit/jit_cli.hpp"
#include "jit/moe_w4a16_bench.hpp"
#include "kiln_config.h"
#include "model/model_cli.hpp"
#include "model/reference/generate_cli.hpp"
#include "runtime/error.hpp"
#include "runtime/exec_target.hpp"
#include "serving/info_cli.hpp"
#if KILN_HAVE_TOKENIZER
#include "model/tokenizer/tokenizer_cli.hpp"
#endif
#if KILN_HAVE_HOST_JIT
#include "jit/host_bench.hpp"
#endif

int main(int argc, char** argv) {
    CLI::App app{"kiln: a serving runtime for Kimi K3-architecture models with JIT-compiled kernels"};
    app.set_version_flag("--version", KILN_VERSION);
    app.require_subcommand(1);
    app.fallthrough();
    app.add_option_function<std::string>(
           "--target",
           [](const std::string& t) {
               kiln::runtime::set_target_preference(kiln::runtime::parse_target_preference(t));
           },
           "Where kernels run: host, cuda or auto (default auto: the GPU when one is usable, else the host)")
        ->envname("KILN_TARGET")
        ->check(CLI::IsMember({"host", "cuda", "auto"}, CLI::ignore_case));
    CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);

    kiln::serving::add_info_command(app);
    kiln::cache::add_cache_commands(app);
    kiln::cache::add_cache_bench(*bench);
    kiln::jit::add_jit_commands(app);
    kiln::jit::add_jit_bench(*bench);
    kiln::jit::add_moe_bench(*bench);
    kiln::model::add_model_commands(app);
    kiln::model::reference::add_reference_commands(app, *bench);
#if KILN_HAVE_TOKENIZER
    kiln::model::add_tokenizer_commands(app);
    kiln::model::add_tokenizer_bench_commands(*bench);
#endif
#if KILN_HAVE_HOST_JIT
    kiln::jit::add_host_bench(*bench);
#else
    bench->add_subcommand("host", "Host target (not in this build)")->callback([] {
        throw kiln::InvalidArgument("kiln bench host: this kiln was built without the host JIT (-Dhost_jit=disabled)");
    });
#endif

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const kiln::Error& e) {
        fmt::print(stderr, "kiln: error: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "kiln: internal error: {}\n", e.what());
        return 2;
    }
    return 0;
}
