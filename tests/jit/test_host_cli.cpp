// The host target from the command line: `kiln jit compile --arch host`, KILN_TARGET / --target,
// `kiln cache ls` with host entries, run as the user runs them.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.hpp"

using Run = kiln::test::CliResult;

namespace {

struct Sandbox : kiln::test::Sandbox {
    Sandbox() : kiln::test::Sandbox("host-cli") {}
    // Runs `kiln ARGS` with no CUDA driver (plus ENV).
    Run kiln(const std::string& args, const std::string& env = "") const {
        return kiln::test::run_kiln(*this, args, "KILN_CUDA_DRIVER=none " + env);
    }
};

}  // namespace

TEST_CASE("kiln jit compile --arch host: compiled once, then a cache hit, listed under the host target name") {
    Sandbox sb;
    const std::string args = "jit compile --family dequant_gemv --arch host --m 2 --n 96 --k 160";
    Run a = sb.kiln(args);
    REQUIRE(a.rc == 0);
    CHECK(a.out.rfind("compiled: ", 0) == 0);
    CHECK(a.out.find("clang + LLVM") != std::string::npos);
    const std::string key = a.out.substr(10, 32);
    Run b = sb.kiln(args + " --json");
    REQUIRE(b.rc == 0);
    auto j = nlohmann::json::parse(b.out);
    CHECK(j["key"] == key);
    CHECK(j["cache_hit"] == true);
    const std::string target = j["target"].get<std::string>();
    CHECK(target.rfind("host-", 0) == 0);
    CHECK(j["compiler"].get<std::string>().rfind("llvm-", 0) == 0);
    CHECK(j["bytes"].get<uint64_t>() > 0);

    Run ls = sb.kiln("cache ls --json");
    REQUIRE(ls.rc == 0);
    auto rows = nlohmann::json::parse(ls.out);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0]["key"] == key);
    CHECK(rows[0]["kind"] == "host_object");
    CHECK(rows[0]["target"] == target);
    CHECK(rows[0]["family"] == "dequant_gemv");
    CHECK(rows[0]["n"] == 96);
    Run human = sb.kiln("cache ls");
    REQUIRE(human.rc == 0);
    CHECK(human.out.find(target) != std::string::npos);
}

TEST_CASE("KILN_TARGET and --target choose the host target when --arch is not given") {
    Sandbox sb;
    const std::string args = "jit compile --json --family moe_routing --experts 24 --topk 3";
    Run env = sb.kiln(args, "KILN_TARGET=host");
    REQUIRE(env.rc == 0);
    auto a = nlohmann::json::parse(env.out);
    CHECK(a["target"].get<std::string>().rfind("host-", 0) == 0);
    Run flag = sb.kiln("--target host " + args);
    REQUIRE(flag.rc == 0);
    auto b = nlohmann::json::parse(flag.out);
    CHECK(b["key"] == a["key"]);
    CHECK(b["cache_hit"] == true);
    // auto (the default) without a CUDA device is the host target too.
    Run dflt = sb.kiln(args);
    REQUIRE(dflt.rc == 0);
    CHECK(nlohmann::json::parse(dflt.out)["key"] == a["key"]);
    // The flag overrides the environment.
    Run cuda = sb.kiln("--target cuda " + args, "KILN_TARGET=host");
    CHECK(cuda.rc == 1);
    CHECK(cuda.err.find("no CUDA device") != std::string::npos);
}

TEST_CASE("bad targets are one clear line") {
    Sandbox sb;
    Run r = sb.kiln("--target gpu info");
    CHECK(r.rc != 0);
    CHECK(r.err.find("--target") != std::string::npos);
    r = sb.kiln("info", "KILN_TARGET=tpu");
    CHECK(r.rc != 0);
    r = sb.kiln("jit compile --family dequant_gemv --arch host --m 1 --n 8 --k 40");
    CHECK(r.rc == 1);
    CHECK(r.err.find("multiple of the group size 32") != std::string::npos);
}

TEST_CASE("kiln cache ls tells host kernels that differ only in top-k apart") {
    Sandbox sb;
    for (int topk : {3, 4})
        REQUIRE(sb.kiln("jit compile --family moe_routing --arch host --experts 24 --topk " + std::to_string(topk)).rc == 0);
    Run ls = sb.kiln("cache ls --json");
    REQUIRE(ls.rc == 0);
    auto rows = nlohmann::json::parse(ls.out);
    REQUIRE(rows.size() == 2);
    std::set<std::string> configs;
    for (const auto& r : rows) configs.insert(r["config"].get<std::string>());
    CHECK(configs.size() == 2);
    CHECK((*configs.begin()).rfind("topk=3,", 0) == 0);
    CHECK((*configs.rbegin()).rfind("topk=4,", 0) == 0);
    // The table too: the rows differ beyond their keys.
    Run table = sb.kiln("cache ls");
    REQUIRE(table.rc == 0);
    CHECK(table.out.find("CONFIG") != std::string::npos);
    CHECK(table.out.find("topk=3,") != std::string::npos);
    CHECK(table.out.find("topk=4,") != std::string::npos);
}
