// The command line's rules, checked on the real app and the built executable: every flag has a KILN_*
// environment variable and README.md documents it; numbers are range-checked before they are stored;
// every error is one `kiln: error:` line and exit status 1; command-line code (CLI11) stays in
// serving/cli/.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "serving/cli/app.hpp"
#include "serving/cli/flags.hpp"
#include "tests/common/cli_runner.hpp"

namespace fs = std::filesystem;

namespace {

fs::path source_root() {
    const char* r = std::getenv("KILN_TEST_SOURCE_ROOT");
    REQUIRE_MESSAGE(r != nullptr, "KILN_TEST_SOURCE_ROOT is not set: run the tests through meson test");
    return r;
}

}  // namespace

TEST_CASE("every flag of every command has a KILN_* environment variable that README.md documents") {
    CLI::App app;
    kiln::cli::add_commands(app);
    const auto flags = kiln::cli::flag_env_names(app);
    std::set<std::string> commands;
    for (const auto& f : flags) commands.insert(f.command);
    CHECK(commands.count("kiln cache"));
    CHECK(commands.count("kiln jit compile"));
    CHECK(commands.count("kiln bench moe"));
    CHECK(flags.size() > 60);
    const std::string readme = kiln::test::slurp_file(source_root() / "README.md");
    for (const auto& f : flags) {
        CAPTURE(f.command + " " + f.flag);
        CHECK(f.env.rfind("KILN_", 0) == 0);
        CHECK(readme.find("`" + f.env + "`") != std::string::npos);
    }
}

TEST_CASE("no library below serving/ includes CLI11") {
    const fs::path root = source_root();
    int scanned = 0;
    for (const char* module : {"runtime", "cache", "jit", "autotune", "model"}) {
        for (const auto& e : fs::recursive_directory_iterator(root / module)) {
            const std::string ext = e.path().extension().string();
            if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h")) continue;
            const std::string rel = fs::relative(e.path(), root).string();
            ++scanned;
            CAPTURE(rel);
            CHECK(kiln::test::slurp_file(e.path()).find("<CLI/") == std::string::npos);
        }
        const std::string build = kiln::test::slurp_file(root / module / "meson.build");
        CAPTURE(module);
        CHECK(build.find("cli11") == std::string::npos);
    }
    CHECK(scanned > 50);
}

namespace {

// One line on stderr, `kiln: error: ` first, exit status 1.
void check_one_line_error(const kiln::test::CliResult& r, const std::string& needle) {
    CHECK(r.rc == 1);
    CHECK(r.err.rfind("kiln: error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find(needle) != std::string::npos);
    CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("numeric flags are range-checked before they are stored, never narrowed or wrapped") {
    kiln::test::Sandbox sb("cli-flags");
    const std::string compile = "jit compile --family moe_routing --arch sm_90a --experts 8 --topk 2";
    struct Case {
        std::string args, env, needle;
    };
    const Case cases[] = {
        {compile + " --warps 257", "", "--warps: 257 is out of range [0, 32]"},
        {compile + " --warps -1", "", "--warps: -1 is out of range [0, 32]"},
        {compile + " --block-m 65600", "", "--block-m: 65600 is out of range [0, 1024]"},
        {compile + " --stages 4", "", "--stages: family moe_routing has no config field stages"},
        {"jit compile --family moe_w4a16_decode --arch sm_90a --matrix sideways", "", "--matrix: 'sideways' is not one of gate_up, down"},
        {compile, "KILN_JIT_WARPS=300", "--warps: 300 is out of range"},
        {compile + " --m 4294967297", "", "--m: 4294967297 is out of range [0, 2147483647]"},
        {"jit compile --family moe_routing --arch sm_90a --experts abc", "", "--experts: 'abc' is not an integer"},
        {"jit compile --family moe_routing --arch sm_90a --experts 1.5", "", "--experts: '1.5' is not an integer"},
        {"generate --max-tokens -1 --ids 1,2", "", "--max-tokens: -1 is out of range [1, 2147483647]"},
        {"generate --max-tokens 0 --ids 1,2", "", "--max-tokens: 0 is out of range"},
        {"generate --ids 1,2", "KILN_GENERATE_MAX_TOKENS=-5", "--max-tokens: -5 is out of range"},
        {"generate --seed -1 --ids 1,2", "", "--seed: -1 is out of range [0, 18446744073709551615]"},
        {"generate --seed 18446744073709551616 --ids 1,2", "", "--seed: 18446744073709551616 is out of range"},
        {"generate --temperature nan --ids 1,2", "", "--temperature: 'nan' is not a finite number"},
        {"generate --top-p 2 --ids 1,2", "", "--top-p: 2 is out of range [0, 1]"},
        {"make-model --out x --seed -3", "", "--seed: -3 is out of range"},
        {"bench reference --prompt-tokens 0", "", "--prompt-tokens: 0 is out of range"},
        {"bench cache --iterations 0", "", "--iterations: 0 is out of range"},
        {"bench jit --reps 0", "", "--reps: 0 is out of range"},
        {"cache prune --max-size 1e30", "", "too large a size"},
        {"cache --cache-max-size -2G ls", "", "is not a size"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.args);
        CAPTURE(c.env);
        check_one_line_error(kiln::test::run_kiln(sb, c.args, c.env), c.needle);
    }
    CHECK_FALSE(fs::exists(sb.cache_dir / "kernels.db"));  // nothing was compiled and cached

    // In range, the value is stored as written, in decimal: 010 is ten experts (not octal eight).
    auto r = kiln::test::run_kiln(sb, "jit compile --json --family moe_routing --arch sm_90a --experts 010 --topk 2");
    REQUIRE(r.rc == 0);
    CHECK(nlohmann::json::parse(r.out)["descriptor"].get<std::string>().find(" e=10 ") != std::string::npos);
}

TEST_CASE("command-line parse errors are one kiln: error line and exit status 1; help and version still work") {
    kiln::test::Sandbox sb("cli-flags");
    check_one_line_error(kiln::test::run_kiln(sb, "jit compile --no-such-flag"), "--no-such-flag");
    check_one_line_error(kiln::test::run_kiln(sb, "no-such-command"), "kiln needs a command: ");
    check_one_line_error(kiln::test::run_kiln(sb, "make-model"), "--out is required");
    check_one_line_error(kiln::test::run_kiln(sb, "--target gpu info"), "--target");
    check_one_line_error(kiln::test::run_kiln(sb, "cache"), "kiln cache needs a command: ls, show,");
    auto help = kiln::test::run_kiln(sb, "jit compile --help");
    CHECK(help.rc == 0);
    CHECK(help.out.find("--warps") != std::string::npos);
    auto version = kiln::test::run_kiln(sb, "--version");
    CHECK(version.rc == 0);
    CHECK_FALSE(version.out.empty());
}
