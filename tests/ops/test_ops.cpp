// The op harness in check mode (tests/ops/op_case.hpp): every case of a family on the backends named by
// KILN_TEST_OPS_BACKEND (host or cuda; meson runs ops/host in the unit suite and ops/gpu in the gpu suite).
// KILN_TEST_OPS=TEXT runs only the cases whose name contains TEXT; the gpu suite runs the quick set unless
// KILN_TEST_OPS_ALL=1. Exits 77 (skipped) when the backend is not available here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "jit/family.hpp"
#include "tests/ops/op_case.hpp"

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

void run_family(const std::string& family) {
    const std::string backend = env("KILN_TEST_OPS_BACKEND"), only = env("KILN_TEST_OPS");
    const bool all = env("KILN_TEST_OPS_ALL") == "1" || backend == "host";
    for (kiln::test::TestBackend* b : kiln::test::available_backends(backend)) {
        int ran = 0;
        for (auto& c : kiln::ops::all_cases(only)) {
            if (c->family() != family || !c->runs_on(*b) || (!all && !c->quick())) continue;
            CAPTURE(b->name);
            const std::string name = c->name();
            CAPTURE(name);
            for (const std::string& f : kiln::ops::check_case(*c, *b)) FAIL_CHECK(f);
            ++ran;
        }
        // A device-only family (a fusion the host target runs as its parts) has no case on the host.
        const kiln::jit::Family* f = kiln::jit::builtin_families().find(family);
        const bool none_here =
            f != nullptr && f->device_only() && b->backend->kind() == kiln::runtime::BackendKind::host;
        if (only.empty()) {
            if (none_here) CHECK_MESSAGE(ran == 0, family << " is device-only but has a case on " << b->name);
            else CHECK_MESSAGE(ran > 0, "no case of " << family << " runs on " << b->name);
        }
    }
}

}  // namespace

TEST_CASE("dequant_gemv") { run_family("dequant_gemv"); }
TEST_CASE("moe_routing") { run_family("moe_routing"); }
TEST_CASE("moe_w4a16_route") { run_family("moe_w4a16_route"); }
TEST_CASE("moe_w4a16_dequant") { run_family("moe_w4a16_dequant"); }
TEST_CASE("moe_w4a16_combine") { run_family("moe_w4a16_combine"); }
TEST_CASE("moe_w4a16_decode") { run_family("moe_w4a16_decode"); }
TEST_CASE("moe_w4a16_decode_fused") { run_family("moe_w4a16_decode_fused"); }
TEST_CASE("moe_w4a16_prefill") { run_family("moe_w4a16_prefill"); }
TEST_CASE("moe_w4a16") { run_family("moe_w4a16"); }
TEST_CASE("rmsnorm") { run_family("rmsnorm"); }
TEST_CASE("glu") { run_family("glu"); }
TEST_CASE("embedding") { run_family("embedding"); }
TEST_CASE("attn_res") { run_family("attn_res"); }
TEST_CASE("router") { run_family("router"); }
TEST_CASE("linear") { run_family("linear"); }
TEST_CASE("sample") { run_family("sample"); }
TEST_CASE("linear_layer") { run_family("linear_layer"); }
TEST_CASE("mla_cache_append") { run_family("mla_cache_append"); }
TEST_CASE("mla_absorb") { run_family("mla_absorb"); }
TEST_CASE("mla_decode") { run_family("mla_decode"); }
TEST_CASE("mla_prefill") { run_family("mla_prefill"); }
TEST_CASE("mla_combine") { run_family("mla_combine"); }
TEST_CASE("mla") { run_family("mla"); }
TEST_CASE("kda_prep") { run_family("kda_prep"); }
TEST_CASE("kda_chunk") { run_family("kda_chunk"); }
TEST_CASE("kda_decode") { run_family("kda_decode"); }
TEST_CASE("kda_out_norm") { run_family("kda_out_norm"); }
TEST_CASE("kda") { run_family("kda"); }

TEST_CASE("every family has a test case above") {
    const char* listed[] = {"dequant_gemv", "moe_routing", "moe_w4a16_route", "moe_w4a16_dequant", "moe_w4a16_combine",
                            "moe_w4a16_decode", "moe_w4a16_decode_fused", "moe_w4a16_prefill", "moe_w4a16", "rmsnorm",
                            "glu", "embedding", "attn_res", "router", "linear", "sample", "linear_layer",
                            "mla_cache_append", "mla_absorb", "mla_decode", "mla_prefill", "mla_combine", "mla",
                            "kda_prep", "kda_chunk", "kda_decode", "kda_out_norm", "kda"};
    for (const std::string& f : kiln::ops::families()) {
        bool found = false;
        for (const char* l : listed) found = found || f == l;
        CHECK_MESSAGE(found, "family " << f << " has no TEST_CASE in tests/ops/test_ops.cpp");
    }
}

int main(int argc, char** argv) {
    const std::string backend = env("KILN_TEST_OPS_BACKEND");
    if (kiln::test::available_backends(backend).empty()) {
        std::fprintf(stderr, "skipped: no %s backend here\n", backend.empty() ? "usable" : backend.c_str());
        return 77;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
