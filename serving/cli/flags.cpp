#include "serving/cli/flags.hpp"

namespace kiln::cli {

CLI::Option* add_json_flag(CLI::App& cmd, bool& json, const std::string& help) {
    return cmd.add_flag("--json", json, help)->envname("KILN_JSON");
}

namespace {

void collect(const CLI::App& app, const std::string& path, std::vector<FlagEnv>& out) {
    for (const CLI::Option* o : app.get_options()) {
        if (!o->nonpositional()) continue;
        const std::string name = o->get_name();
        if (name == "--help" || name == "--version") continue;
        out.push_back({path, name, o->get_envname()});
    }
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        collect(*sub, path + " " + sub->get_name(), out);
}

}  // namespace

std::vector<FlagEnv> flag_env_names(const CLI::App& app) {
    std::vector<FlagEnv> out;
    collect(app, "kiln", out);
    return out;
}

}  // namespace kiln::cli
