#include "serving/cli/app.hpp"

#include <exception>

#include "kiln_config.h"
#include "runtime/exec_target.hpp"
#include "serving/cli/commands.hpp"
#include "serving/cli/errors.hpp"

namespace kiln::cli {

void add_commands(CLI::App& app) {
    app.set_version_flag("--version", KILN_VERSION);
    app.require_subcommand(1);
    app.fallthrough();
    app.add_option_function<std::string>(
           "--target",
           [](const std::string& t) { runtime::set_target_preference(runtime::parse_target_preference(t)); },
           "Where kernels run: host, cuda or auto (default auto: the GPU when one is usable, else the host)")
        ->envname("KILN_TARGET")
        ->check(CLI::IsMember({"host", "cuda", "auto"}, CLI::ignore_case));
    add_bench_command(app);
    add_info_command(app);
    add_cache_command(app);
    add_jit_command(app);
    add_make_model_command(app);
    add_generate_command(app);
#if KILN_HAVE_TOKENIZER
    add_tokenize_commands(app);
#endif
}

int run(int argc, char** argv) {
    CLI::App app{"kiln: a serving runtime for Kimi K3-architecture models with JIT-compiled kernels"};
    add_commands(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        return report_error(e);
    }
    return 0;
}

}  // namespace kiln::cli
