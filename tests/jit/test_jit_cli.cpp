// `kiln jit families` and `kiln jit compile`, run as the user runs them (and beside a stopped process that
// holds a compile lease).
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "jit/family.hpp"
#include "tests/common/cli_runner.hpp"
#include "tests/common/lease_holder.hpp"

using kiln::test::slurp_file;
using Run = kiln::test::CliResult;

namespace {

struct Sandbox : kiln::test::Sandbox {
    Sandbox() : kiln::test::Sandbox("jit-cli") {}
    Run kiln(const std::string& args, const std::string& env = "") const { return kiln::test::run_kiln(*this, args, env); }
};

}  // namespace

TEST_CASE("kiln jit families lists the built-in families") {
    Sandbox sb;
    Run r = sb.kiln("jit families");
    CHECK(r.rc == 0);
    CHECK(r.out.find("moe_routing") != std::string::npos);
    CHECK(r.out.find("dequant_gemv") != std::string::npos);
    Run j = sb.kiln("jit families --json");
    REQUIRE(j.rc == 0);
    auto fams = nlohmann::json::parse(j.out);
    REQUIRE(fams.size() == kiln::jit::builtin_families().list().size());
    CHECK(fams[0]["family"] == "attn_res");
    CHECK(fams[1]["family"] == "dequant_gemv");
    CHECK(fams[1]["modes"][0] == "dense");
    for (const auto& f : fams)
        if (f["family"] == "moe_routing") CHECK(f["modes"][0] == "indexed");
    // every family's named config fields, with their ranges
    bool decode = false;
    for (const auto& f : fams)
        if (f["family"] == "moe_w4a16_decode") {
            decode = true;
            CHECK(f["config"][0]["name"] == "matrix");
            CHECK(f["config"][0]["choices"][1] == "down");
            CHECK(f["device_only"] == false);
        }
    for (const auto& f : fams)
        if (f["family"] == "moe_routing") CHECK(f["modes"][0] == "indexed");
    CHECK(decode);
}

TEST_CASE("kiln jit compile: first run compiles, second is a cache hit with the same key and no NVRTC") {
    Sandbox sb;
    const std::string args = "jit compile --family moe_routing --arch sm_90a --experts 40 --topk 4";
    Run a = sb.kiln(args);
    REQUIRE(a.rc == 0);
    CHECK(a.out.rfind("compiled: ", 0) == 0);
    std::string key = a.out.substr(10, 32);
    Run b = sb.kiln(args);
    REQUIRE(b.rc == 0);
    CHECK(b.out.rfind("cache hit", 0) == 0);
    CHECK(b.out.find(key) != std::string::npos);

    Run j = sb.kiln(args + " --json");
    REQUIRE(j.rc == 0);
    auto out = nlohmann::json::parse(j.out);
    CHECK(out["key"] == key);
    CHECK(out["cache_hit"] == true);
    CHECK(out["nvrtc_loaded"] == false);  // a hit needs neither NVRTC nor the CUDA headers
    CHECK(out["target"] == "sm_90a");

    // Every flag has its environment variable.
    Run e = sb.kiln("jit compile --json",
                    "KILN_JIT_FAMILY=moe_routing KILN_JIT_ARCH=sm_90a KILN_JIT_EXPERTS=40 KILN_JIT_TOPK=4");
    REQUIRE(e.rc == 0);
    CHECK(nlohmann::json::parse(e.out)["key"] == key);
    // The canonical text form names the same kernel.
    Run t = sb.kiln("jit compile --json --descriptor '" + out["descriptor"].get<std::string>() + "'");
    REQUIRE(t.rc == 0);
    CHECK(nlohmann::json::parse(t.out)["key"] == key);
    // Another config is another kernel.
    Run c = sb.kiln(args + " --block-m 32 --json");
    REQUIRE(c.rc == 0);
    CHECK(nlohmann::json::parse(c.out)["key"] != key);
    CHECK(nlohmann::json::parse(c.out)["cache_hit"] == false);
}

TEST_CASE("two processes compiling the same missing kernel compile it once") {
    Sandbox sb;
    std::string one =
        kiln::test::kiln_command(sb, "jit compile --json --family dequant_gemv --arch sm_90a --m 2 --n 96 --k 256");
    std::string cmd = "(" + one + " >'" + (sb.dir / "a.json") + "' & " + one + " >'" + (sb.dir / "b.json") +
                      "' & wait)";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto a = nlohmann::json::parse(slurp_file(sb.dir.path / "a.json"));
    auto b = nlohmann::json::parse(slurp_file(sb.dir.path / "b.json"));
    CHECK(a["key"] == b["key"]);
    CHECK(a["cache_hit"].get<bool>() != b["cache_hit"].get<bool>());
}

TEST_CASE("kiln jit compile errors are one clear line") {
    Sandbox sb;
    Run r = sb.kiln("jit compile --family nope --arch sm_90a");
    CHECK(r.rc == 1);
    CHECK(r.err.find("unknown kernel family 'nope'") != std::string::npos);
    r = sb.kiln("jit compile --family dequant_gemv --arch sm_90a --m 1 --n 8 --k 40");
    CHECK(r.rc == 1);
    CHECK(r.err.find("multiple of the group size 32") != std::string::npos);
    r = sb.kiln("jit compile --family moe_routing --arch sm90 --experts 8 --topk 2");
    CHECK(r.rc == 1);
    CHECK(r.err.find("not a target") != std::string::npos);
    // KILN_TARGET=cuda without a device (auto would pick the host target where there is one).
    r = sb.kiln("jit compile --family moe_routing --experts 8 --topk 2", "KILN_CUDA_DRIVER=none KILN_TARGET=cuda");
    CHECK(r.rc == 1);
    CHECK(r.err.find("--arch") != std::string::npos);
}

TEST_CASE("kiln jit compile waits for a stopped lease holder, says who it is, then takes over and compiles") {
    const std::string args = "jit compile --json --family moe_routing --arch sm_90a --experts 44 --topk 4";
    Sandbox probe;
    Run first = probe.kiln(args);
    REQUIRE(first.rc == 0);
    const std::string key = nlohmann::json::parse(first.out)["key"].get<std::string>();

    // Another process holds the lease on that key in a fresh cache, and is stopped (SIGSTOP).
    Sandbox sb;
    kiln::cache::StoreOptions opts;
    opts.cache_dir = sb.cache_dir.string();
    kiln::test::LeaseHolder holder(opts, kiln::cache::ContentKey::parse(key));
    REQUIRE(::kill(holder.pid, SIGSTOP) == 0);

    Run r = sb.kiln(args, "KILN_LOG_LEVEL=warn KILN_JIT_LEASE_TIMEOUT=4");
    const pid_t holder_pid = holder.pid;
    CHECK(holder.kill_now());
    REQUIRE(r.rc == 0);
    auto out = nlohmann::json::parse(r.out);
    CHECK(out["key"] == key);
    CHECK(out["cache_hit"] == false);
    CHECK(r.err.find("waiting for the compile lease on key " + key + ": pid " + std::to_string(holder_pid) + " (stopped)") !=
          std::string::npos);
    CHECK(r.err.find("taking it over") != std::string::npos);
    CHECK(r.err.find("KILN_JIT_LEASE_TIMEOUT") != std::string::npos);
}
