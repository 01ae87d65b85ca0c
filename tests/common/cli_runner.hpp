// Runs the built kiln executable (KILN_TEST_BIN, set by meson) the way a user does, and captures what
// it did: exit status, stdout and stderr. Arguments and extra environment are shell text, so tests
// can quote paths and use $(...) as they would at a prompt.
#pragma once

#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "tests/common/sandbox.hpp"

namespace kiln::test {

struct CliResult {
    int rc = -1;  // exit status; -1 when killed by a signal
    std::string out, err;
};

// 'text' quoted for the shell.
inline std::string shell_quote(std::string_view s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

inline std::string kiln_bin() {
    const char* b = std::getenv("KILN_TEST_BIN");
    REQUIRE_MESSAGE(b != nullptr, "KILN_TEST_BIN is not set: run the tests through meson test");
    return b;
}

inline std::string slurp_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The shell command that runs `kiln ARGS` in `sb`: through its launcher, inherited KILN_* settings
// removed, KILN_CACHE_DIR set to the sandbox's cache, then ENV (shell assignments, e.g. "KILN_JSON=1").
inline std::string kiln_command(const Sandbox& sb, std::string_view args, std::string_view env = "") {
    std::string cmd = sb.launcher.empty() ? "env" : sb.launcher + " env";
    for (const auto& name : inherited_kiln_settings()) cmd.append(" -u ").append(name);
    cmd.append(" KILN_CACHE_DIR=").append(shell_quote(sb.cache_dir.string()));
    if (!env.empty()) cmd.append(" ").append(env);
    cmd.append(" ").append(shell_quote(kiln_bin())).append(" ").append(args);
    return cmd;
}

// Runs `kiln ARGS` in `sb` (see kiln_command), standard input /dev/null, and waits for it.
inline CliResult run_kiln(const Sandbox& sb, std::string_view args, std::string_view env = "") {
    static std::atomic<int> counter{0};
    const int n = counter++;
    const fs::path out = sb.dir.path / ("run-" + std::to_string(n) + ".out");
    const fs::path err = sb.dir.path / ("run-" + std::to_string(n) + ".err");
    std::string cmd = kiln_command(sb, args, env);
    cmd.append(" </dev/null >").append(shell_quote(out.string())).append(" 2>").append(shell_quote(err.string()));
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp_file(out);
    r.err = slurp_file(err);
    std::error_code ec;
    fs::remove(out, ec);
    fs::remove(err, ec);
    return r;
}

}  // namespace kiln::test
