// `kiln info`: human and JSON output, with and without a CUDA driver.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct Run {
    int rc = -1;
    std::string out, err;
};

Run kiln(const std::string& args, const std::string& env = "") {
    const char* bin = std::getenv("KILN_TEST_BIN");
    REQUIRE(bin != nullptr);
    fs::path dir = fs::temp_directory_path();
    fs::path out = dir / ("kiln-info-test-" + std::to_string(::getpid()) + ".out");
    fs::path err = dir / ("kiln-info-test-" + std::to_string(::getpid()) + ".err");
    std::string cmd = "env " + env + " '" + bin + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
    int status = std::system(cmd.c_str());
    Run r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream o(out), e(err);
    std::stringstream so, se;
    so << o.rdbuf();
    se << e.rdbuf();
    r.out = so.str();
    r.err = se.str();
    fs::remove(out);
    fs::remove(err);
    return r;
}

}  // namespace

TEST_CASE("kiln info --json reports driver, NVRTC, headers, target and the kernel cache") {
    fs::path cache = fs::temp_directory_path() / ("kiln-info-cache-" + std::to_string(::getpid()));
    const std::string env = "KILN_CACHE_DIR='" + cache.string() + "'";
    Run empty = kiln("info --json", env);
    REQUIRE(empty.rc == 0);
    CHECK(nlohmann::json::parse(empty.out)["cache"]["entries"] == 0);
    CHECK_FALSE(fs::exists(cache / "kernels.db"));  // info never creates the cache
    REQUIRE(kiln("jit compile --family moe_routing --arch sm_90a --experts 8 --topk 2", env).rc == 0);
    Run r = kiln("info --json", env);
    fs::remove_all(cache);
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
    if (j["devices"].empty()) CHECK(j["target"] == "host");
    else CHECK(j["target"].get<std::string>().rfind("sm_", 0) == 0);
}

TEST_CASE("kiln info without a driver says why and still works") {
    Run r = kiln("info --json", "KILN_CUDA_DRIVER=/nonexistent/libcuda.so.1");
    REQUIRE(r.rc == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["driver"]["state"] == "no_library");
    CHECK(j["driver"]["reason"].get<std::string>().find("/nonexistent/libcuda.so.1") != std::string::npos);
    CHECK(j["devices"].empty());
    CHECK(j["target"] == "host");
    Run h = kiln("info", "KILN_CUDA_DRIVER=none");
    CHECK(h.rc == 0);
    CHECK(h.out.find("CUDA driver  none") != std::string::npos);
    CHECK(h.out.find("NVRTC") != std::string::npos);
}
