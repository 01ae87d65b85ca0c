#include "serving/cli/app.hpp"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

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
    add_tune_command(app);
#if KILN_HAVE_TOKENIZER
    add_tokenize_commands(app);
#endif
#if KILN_HAVE_HTTP && KILN_HAVE_TOKENIZER
    add_serve_command(app);
#endif
}

namespace {

// CLI11 says only "A subcommand is required": name the command and what it takes, and the word that
// was not one of them.
std::string missing_subcommand(const CLI::App& app) {
    const CLI::App* at = &app;
    std::string path = "kiln";
    for (std::vector<const CLI::App*> chosen; !(chosen = at->get_subcommands([](const CLI::App* a) {
                                                      return a->parsed();
                                                  })).empty();) {
        at = chosen.front();
        path += " " + at->get_name();
    }
    std::string names;
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + sub->get_name();
    std::string msg = fmt::format("{} needs a command: {}", path, names);
    const std::vector<std::string> rest = app.remaining();
    if (!rest.empty()) msg += fmt::format(" ('{}' is not one)", rest.front());
    return msg;
}

}  // namespace

int run(int argc, char** argv) {
    CLI::App app{"kiln: a serving runtime for Kimi K3-architecture models with JIT-compiled kernels"};
    add_commands(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        const std::string what = e.what();
        std::fputs(error_line(what.rfind("A subcommand is required", 0) == 0 ? missing_subcommand(app) : what).c_str(),
                   stderr);
        return 1;
    } catch (const std::exception& e) {
        return report_error(e);
    }
    return 0;
}

}  // namespace kiln::cli
