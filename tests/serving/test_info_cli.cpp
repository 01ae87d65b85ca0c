// `kiln info`: human and JSON output, with and without a CUDA driver.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.hpp"

using Run = kiln::test::CliResult;

namespace {

Run run(const kiln::test::Sandbox& sb, const std::string& args, const std::string& env = "") {
    return kiln::test::run_kiln(sb, args, env);
}

// Without a device the target is the host's ("host-<triple>-<cpu>"), or none in a GPU-only build.
void check_host_target(const nlohmann::json& j) {
    const std::string t = j["target"].get<std::string>();
    if (j["host_jit"].get<bool>()) CHECK(t.rfind("host-", 0) == 0);
    else CHECK(t == "none");
}

}  // namespace

TEST_CASE("kiln info --json reports driver, NVRTC, headers, target and the kernel cache") {
    kiln::test::Sandbox sb("info-cli");
    const kiln::test::fs::path& cache = sb.cache_dir;
    Run empty = run(sb, "info --json");
    REQUIRE(empty.rc == 0);
    CHECK(nlohmann::json::parse(empty.out)["cache"]["entries"] == 0);
    CHECK_FALSE(kiln::test::fs::exists(cache / "kernels.db"));  // info never creates the cache
    REQUIRE(run(sb, "jit compile --family moe_routing --arch sm_90a --experts 8 --topk 2").rc == 0);
    Run r = run(sb, "info --json");
    REQUIRE(r.rc == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["version"].is_string());
    CHECK(j["driver"]["state"].is_string());
    CHECK(j["nvrtc"]["found"] == true);
    CHECK(j["cuda_headers"]["found"] == true);
    CHECK(j["key_compiler_identity"].get<std::string>().rfind("nvrtc-", 0) == 0);
    CHECK(j["cache"]["user_dir"] == cache.string());
    CHECK(j["cache"]["entries"] == 1);
    REQUIRE(j["cache"]["layers"].size() == 1);
    CHECK(j["cache"]["layers"][0]["name"] == "user");
    CHECK(j["cache"]["layers"][0]["file_bytes"].get<uint64_t>() > 0);
    if (j["devices"].empty()) check_host_target(j);
    else CHECK(j["target"].get<std::string>().rfind("sm_", 0) == 0);
    CHECK(j["target_reason"].is_string());
}

TEST_CASE("kiln info without a driver says why and still works") {
    kiln::test::Sandbox sb("info-cli");
    Run r = run(sb, "info --json", "KILN_CUDA_DRIVER=/nonexistent/libcuda.so.1");
    REQUIRE(r.rc == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["driver"]["state"] == "no_library");
    CHECK(j["driver"]["reason"].get<std::string>().find("/nonexistent/libcuda.so.1") != std::string::npos);
    CHECK(j["devices"].empty());
    check_host_target(j);
    // KILN_TARGET=cuda without a device: no target, and the reason says so.
    Run c = run(sb, "info --json", "KILN_CUDA_DRIVER=none KILN_TARGET=cuda");
    REQUIRE(c.rc == 0);
    auto cj = nlohmann::json::parse(c.out);
    CHECK(cj["target"] == "none");
    CHECK(cj["target_reason"].get<std::string>().find("no CUDA device") != std::string::npos);
    Run h = run(sb, "info", "KILN_CUDA_DRIVER=none");
    CHECK(h.rc == 0);
    CHECK(h.out.find("CUDA driver  none") != std::string::npos);
    CHECK(h.out.find("NVRTC") != std::string::npos);
}
