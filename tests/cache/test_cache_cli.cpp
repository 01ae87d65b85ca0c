// `kiln cache ...` end to end through the built executable (KILN_TEST_BIN) on temp caches filled
// through Store::put.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "cache_test_util.hpp"
#include "runtime/atomic_file.hpp"
#include "tests/common/cli_runner.hpp"
#include "tests/common/read_only_dir.hpp"

using namespace kiln::cache;
using namespace kiln::cache::test;
using nlohmann::json;

namespace {

using Run = kiln::test::CliResult;

// A user cache filled through Store::put: three cubins and a host object.
struct Cli {
    kiln::test::Sandbox sb{"cache-cli"};
    const TempDir& dir = sb.dir;
    std::vector<Artifact> arts;

    Cli() {
        sb.cache_dir = dir.path / "user";
        Store s(options_in(dir));
        for (uint64_t i = 0; i < 3; ++i) arts.push_back(make_artifact(i, 10000 + i * 1000));
        arts.push_back(make_artifact(7, 3000, ArtifactKind::host_object, "routing_prep"));
        for (auto& a : arts) REQUIRE(s.put(a));
    }

    // Runs `kiln ARGS` on that cache, warnings shown (plus `env`).
    Run run(const std::string& args, const std::string& env = "") const {
        return kiln::test::run_kiln(sb, args, "KILN_LOG_LEVEL=warn " + env);
    }
};

std::string unique_prefix(const std::vector<Artifact>& arts, size_t i) {
    const std::string full = arts[i].info.key.hex();
    for (size_t len = 4; len < 32; ++len) {
        int matches = 0;
        for (auto& a : arts) matches += a.info.key.hex().compare(0, len, full, 0, len) == 0;
        if (matches == 1) return full.substr(0, len);
    }
    return full;
}

}  // namespace

TEST_CASE("cache ls --json lists every artifact with its descriptor") {
    Cli cli;
    Run r = cli.run("cache ls --json");
    REQUIRE(r.rc == 0);
    json j = json::parse(r.out);
    REQUIRE(j.is_array());
    REQUIRE(j.size() == cli.arts.size());
    for (const auto& a : cli.arts) {
        auto it = std::find_if(j.begin(), j.end(), [&](const json& o) { return o.at("key") == a.info.key.hex(); });
        REQUIRE(it != j.end());
        const json& o = *it;
        CHECK(o.at("family") == a.info.family);
        CHECK(o.at("mode") == a.info.mode);
        CHECK(o.at("m") == a.info.m);
        CHECK(o.at("n") == a.info.n);
        CHECK(o.at("k") == a.info.k);
        CHECK(o.at("experts") == a.info.experts);
        CHECK(o.at("target") == a.info.target);
        CHECK(o.at("bytes") == a.blob.size());
        CHECK(o.at("compile_ms").get<double>() == doctest::Approx(a.info.compile_ms));
        CHECK(o.at("hits") == 0);
        CHECK(o.at("kind") == to_string(a.info.kind));
        CHECK(o.at("layer") == "user");
    }
    // The same through the environment variable.
    Run env = cli.run("cache ls", "KILN_JSON=1");
    REQUIRE(env.rc == 0);
    CHECK(json::parse(env.out).size() == cli.arts.size());
}

TEST_CASE("cache ls prints a table") {
    Cli cli;
    Run r = cli.run("cache ls");
    REQUIRE(r.rc == 0);
    CHECK(r.out.rfind("KEY", 0) == 0);
    CHECK(r.out.find("FAMILY") != std::string::npos);
    CHECK(r.out.find("routing_prep") != std::string::npos);
    CHECK(r.out.find(cli.arts[1].info.key.hex().substr(0, 12)) != std::string::npos);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1 + static_cast<long>(cli.arts.size()));
}

TEST_CASE("cache show accepts a unique key prefix") {
    Cli cli;
    const Artifact& a = cli.arts[2];
    Run r = cli.run("cache show " + unique_prefix(cli.arts, 2));
    REQUIRE(r.rc == 0);
    CHECK(r.out.find(a.info.key.hex()) != std::string::npos);
    CHECK(r.out.find(a.info.kernel_name) != std::string::npos);
    CHECK(r.out.find(a.info.config) != std::string::npos);
    Run j = cli.run("cache show --json " + a.info.key.hex());
    REQUIRE(j.rc == 0);
    json o = json::parse(j.out);
    CHECK(o.at("key") == a.info.key.hex());
    CHECK(o.at("sha256").get<std::string>().size() == 64);
}

TEST_CASE("cache show reports a missing or malformed key as a one-line error") {
    Cli cli;
    std::string absent = "0000000000000000";
    Run r = cli.run("cache show " + absent);
    CHECK(r.rc == 1);
    CHECK(r.err.rfind("kiln: error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    Run bad = cli.run("cache show not-hex");
    CHECK(bad.rc == 1);
    CHECK(bad.err.find("not a cache key") != std::string::npos);
}

TEST_CASE("cache stats and verify") {
    Cli cli;
    Run s = cli.run("cache stats --json");
    REQUIRE(s.rc == 0);
    json j = json::parse(s.out);
    CHECK(j.at("entries") == 4);
    CHECK(j.at("caching_enabled") == true);
    CHECK(j.at("by_target").size() == 2);
    Run h = cli.run("cache stats");
    REQUIRE(h.rc == 0);
    CHECK(h.out.find("kernels   4") != std::string::npos);
    Run v = cli.run("cache verify");
    CHECK(v.rc == 0);
    CHECK(v.out.find("checked 4 artifacts: all ok") != std::string::npos);
}

TEST_CASE("keygen, signed export, serving a prebuilt layer, import, prune, clear") {
    Cli cli;
    std::string key = cli.dir / "sign.pem", layer = cli.dir / "k3.kcache";
    Run kg = cli.run("cache keygen --out '" + key + "'");
    REQUIRE(kg.rc == 0);
    CHECK(fs::exists(key));
    CHECK(fs::exists(key + ".pub"));
    CHECK(cli.run("cache keygen --out '" + key + "'").rc == 1);  // never overwrites a key

    Run ex = cli.run("cache export '" + layer + "' --sign-key '" + key + "' --json");
    REQUIRE(ex.rc == 0);
    json e = json::parse(ex.out);
    CHECK(e.at("entries") == 4);
    CHECK(e.at("signed") == true);

    // A server with an empty user cache, the layer and its public key, through the env variables.
    std::string server_env = "KILN_KERNEL_CACHE='" + layer + "' KILN_TRUSTED_KEYS='" + key + ".pub'";
    std::string empty = "--cache-dir '" + (cli.dir / "server") + "'";
    Run ls = cli.run("cache " + empty + " ls --json", server_env);
    REQUIRE(ls.rc == 0);
    json items = json::parse(ls.out);
    REQUIRE(items.size() == 4);
    for (auto& o : items) CHECK(o.at("layer") == layer);
    Run st = cli.run("cache " + empty + " stats --json", server_env);
    REQUIRE(st.rc == 0);
    CHECK(json::parse(st.out).at("layers")[0].at("trust") == "trusted");
    CHECK(st.err.empty());  // trusted: no warning

    // Without the key the layer is untrusted: a warning, and import takes its cubins only.
    Run imp = cli.run("cache " + empty + " import '" + layer + "'");
    REQUIRE(imp.rc == 0);
    CHECK(imp.out.find("imported 3 kernels") != std::string::npos);
    CHECK(imp.err.find("warning") != std::string::npos);

    Run pr = cli.run("cache " + empty + " prune --max-size 12K --json");
    REQUIRE(pr.rc == 0);
    CHECK(json::parse(pr.out).at("freed_bytes").get<uint64_t>() > 0);
    CHECK(json::parse(cli.run("cache " + empty + " ls --json").out).size() == 1);

    Run cl = cli.run("cache " + empty + " clear", server_env);
    REQUIRE(cl.rc == 0);
    CHECK(fs::exists(layer));  // prebuilt files are never deleted
    Run after = cli.run("cache " + empty + " ls --json", server_env);
    CHECK(json::parse(after.out).size() == 4);  // the prebuilt layer still serves
    CHECK(json::parse(cli.run("cache " + empty + " ls --json").out).empty());
}

TEST_CASE("a tampered prebuilt layer makes the CLI fail with a clear error") {
    Cli cli;
    std::string layer = cli.dir / "k3.kcache", key = cli.dir / "sign.pem";
    REQUIRE(cli.run("cache keygen --out '" + key + "'").rc == 0);
    REQUIRE(cli.run("cache export '" + layer + "' --sign-key '" + key + "'").rc == 0);
    std::string bytes = slurp(layer);
    // Rename one kernel in place (same length) everywhere it is stored: the manifest signature breaks.
    std::string name = cli.arts[0].info.kernel_name, renamed = name;
    renamed.back() = renamed.back() == '0' ? '1' : '0';
    int replaced = 0;
    for (size_t at = bytes.find(name); at != std::string::npos; at = bytes.find(name, at + 1), ++replaced)
        bytes.replace(at, name.size(), renamed);
    REQUIRE(replaced >= 2);
    spit(layer, bytes);
    Run r = cli.run("cache ls --kernel-cache '" + layer + "'");
    CHECK(r.rc == 1);
    CHECK(r.err.rfind("kiln: error: ", 0) == 0);
    CHECK(r.err.find(layer) != std::string::npos);
}

TEST_CASE("--require-signed / KILN_REQUIRE_SIGNED and --trusted-key refuse layers not signed by a trusted key") {
    Cli cli;
    std::string key = cli.dir / "sign.pem", other = cli.dir / "other.pem";
    std::string signed_layer = cli.dir / "signed.kcache", unsigned_layer = cli.dir / "unsigned.kcache";
    REQUIRE(cli.run("cache keygen --out '" + key + "'").rc == 0);
    REQUIRE(cli.run("cache keygen --out '" + other + "'").rc == 0);
    REQUIRE(cli.run("cache export '" + signed_layer + "' --sign-key '" + key + "'").rc == 0);
    REQUIRE(cli.run("cache export '" + unsigned_layer + "'").rc == 0);
    const std::string empty = "cache --cache-dir '" + (cli.dir / "server") + "' ";
    auto refused = [&](const Run& r, const std::string& layer) {
        CHECK(r.rc == 1);
        CHECK(r.err.rfind("kiln: error: prebuilt cache " + layer, 0) == 0);
        CHECK(r.err.find("refusing it") != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    };
    refused(cli.run(empty + "ls --kernel-cache '" + unsigned_layer + "' --trusted-key '" + key + ".pub'"), unsigned_layer);
    refused(cli.run(empty + "ls --kernel-cache '" + signed_layer + "' --trusted-key '" + other + ".pub'"), signed_layer);
    refused(cli.run(empty + "ls --require-signed --kernel-cache '" + signed_layer + "'"), signed_layer);
    refused(cli.run(empty + "ls", "KILN_REQUIRE_SIGNED=1 KILN_KERNEL_CACHE='" + unsigned_layer + "'"), unsigned_layer);
    refused(cli.run(empty + "import '" + signed_layer + "' --trusted-key '" + other + ".pub'"), signed_layer);
    Run ok = cli.run(empty + "ls --json", "KILN_REQUIRE_SIGNED=1 KILN_KERNEL_CACHE='" + signed_layer +
                                              "' KILN_TRUSTED_KEYS='" + key + ".pub'");
    REQUIRE(ok.rc == 0);
    CHECK(json::parse(ok.out).size() == 4);
    CHECK(ok.err.empty());
}

TEST_CASE("a user cache that cannot be written is still read, and writing commands fail with a clear error") {
    Cli cli;
    const std::string compile = "jit compile --json --family moe_routing --arch sm_90a --experts 12 --topk 3";
    Run first = cli.run(compile);
    REQUIRE(first.rc == 0);
    const std::string key = json::parse(first.out)["key"].get<std::string>();
    std::string layer = cli.dir / "k3.kcache";
    REQUIRE(cli.run("cache export '" + layer + "'").rc == 0);

    kiln::test::ReadOnlyDir ro(cli.sb.cache_dir);
    if (!ro.available()) {
        MESSAGE("skipped: no way to make a directory read-only for root here (no mount namespace)");
        return;
    }
    MESSAGE("read-only through " << ro.how());
    cli.sb.launcher = ro.launcher();
    for (const std::string flags : {"", "--cache-read-only "}) {
        CAPTURE(flags);
        Run ls = cli.run("cache " + flags + "ls --json");
        REQUIRE(ls.rc == 0);
        CHECK(json::parse(ls.out).size() == 5);  // read, not "unable to open database file"
        CHECK(ls.err.find("cannot be read") == std::string::npos);
        // A kernel in the cache is a hit, not a recompile.
        Run hit = cli.run(flags.empty() ? compile : compile + " --cache-read-only");
        REQUIRE(hit.rc == 0);
        CHECK(json::parse(hit.out)["cache_hit"] == true);
        CHECK(json::parse(hit.out)["key"] == key);
        auto fails = [&](const std::string& args, const std::string& needle) {
            CAPTURE(args);
            Run r = cli.run(args);
            CHECK(r.rc == 1);
            CHECK(r.out.empty());
            const size_t at = r.err.find("kiln: error: ");
            REQUIRE(at != std::string::npos);
            const std::string line = r.err.substr(at);
            CHECK(std::count(line.begin(), line.end(), '\n') == 1);
            CHECK(line.find(needle) != std::string::npos);
        };
        fails("cache " + flags + "clear", "cannot clear");
        fails("cache " + flags + "prune --max-size 1K", "cannot prune");
        fails("cache " + flags + "import '" + layer + "'", "cannot import");
        fails("jit compile --family moe_routing --arch sm_90a --experts 13 --topk 3 " + flags,
              "but cannot store it");
    }
    CHECK(json::parse(cli.run("cache ls --json").out).size() == 5);
}

TEST_CASE("cache export removes what a killed export left beside its target, and nothing a live one writes") {
    Cli cli;
    const std::string layer = cli.dir / "k3.kcache";
    // The state a `kiln cache export` killed mid-way leaves: its temp file and the temp file's journal,
    // named for a process that no longer runs. And a temp file of a process that is still running.
    const std::string live = kiln::temp_sibling(layer);  // this process: alive
    spit(live, "in progress");
    std::vector<std::string> stale;
    pid_t dead = ::fork();
    REQUIRE(dead >= 0);
    if (dead == 0) {
        const std::string tmp = kiln::temp_sibling(layer);
        spit(tmp, std::string(200000, 'x'));
        spit(tmp + "-journal", std::string(5000, 'j'));
        ::_exit(0);
    }
    REQUIRE(::waitpid(dead, nullptr, 0) == dead);
    for (const auto& e : fs::directory_iterator(cli.dir.path))
        if (e.path().filename().string().find(".tmp-" + std::to_string(dead) + "-") != std::string::npos)
            stale.push_back(e.path().string());
    REQUIRE(stale.size() == 2);

    Run ex = cli.run("cache export '" + layer + "'");
    REQUIRE(ex.rc == 0);
    for (const auto& f : stale) CHECK_FALSE(fs::exists(f));
    CHECK(fs::exists(live));
    CHECK(fs::exists(layer));
    fs::remove(live);
}
