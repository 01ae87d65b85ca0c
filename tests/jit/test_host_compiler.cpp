#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "jit/host_compiler.hpp"
#include "jit/template_store.hpp"
#include "runtime/host/stream.hpp"

using namespace kiln;
using namespace kiln::jit;

namespace {

// A small kernel written like the family templates: the prelude, a parallel loop, shape constants
// baked into the generated source.
HostKernelSource saxpy_source(int n, float a) {
    HostKernelSource s;
    s.name = fmt::format("test saxpy n={}", n);
    s.source = fmt::format(R"(#include "host/prelude.hpp"
struct Args {{ const float* x; float* y; }};
constexpr kiln_host::i64 N = {};
extern "C" void saxpy(const kiln_host_ctx* ctx, const void* p) {{
    KILN_HOST_ENTRY_GUARD(ctx, 0);
    const Args& a = *static_cast<const Args*>(p);
    auto body = [&](kiln_host::i64 b, kiln_host::i64 e) {{
        for (kiln_host::i64 i = b; i < e; ++i) a.y[i] = {:.9e}f * a.x[i] + a.y[i];
    }};
    kiln_host::parallel_for(ctx, N, 256, body);
}}
)",
                           n, a);
    s.headers = {{"host/prelude.hpp", TemplateStore::instance().read("host/prelude.hpp")}};
    s.entries = {"saxpy"};
    s.columns.family = "test_saxpy";
    s.columns.n = n;
    return s;
}

struct SaxpyArgs {
    const float* x;
    float* y;
};

}  // namespace

TEST_CASE("host target detection and naming") {
    HostTarget t = HostTarget::detect();
    CHECK(!t.triple.empty());
    CHECK(!t.cpu.empty());
    CHECK(!t.features.empty());
    CHECK(t.name() == "host-" + t.triple + "-" + t.cpu);
    // A CPU newer than LLVM is named by the baseline (clang rejects "generic" for x86), and the
    // same name is accepted as an explicit CPU.
    if (t.triple.rfind("x86_64", 0) == 0) CHECK(t.cpu != "generic");
    CHECK_NOTHROW(HostTarget::for_cpu(t.cpu));
    CHECK(t.runs_on(t));
    CHECK(std::is_sorted(t.features.begin(), t.features.end(),
                         [](const std::string& a, const std::string& b) { return a.substr(1) < b.substr(1); }));
    // A generic CPU runs here; a CPU with a feature this machine lacks does not.
    CHECK(HostTarget::for_cpu("x86-64").runs_on(t));
    HostTarget more = t;
    bool flipped = false;
    for (auto& f : more.features)
        if (f[0] == '-') {
            f[0] = '+';
            flipped = true;
            break;
        }
    if (flipped) CHECK(!more.runs_on(t));
    CHECK_THROWS_AS(HostTarget::for_cpu("no-such-cpu"), InvalidArgument);
}

TEST_CASE("compile, load and run a host kernel on a host stream") {
    HostCompiler hc({});
    REQUIRE(hc.native());
    for (int n : {1, 7, 1000, 4099}) {
        uint64_t before = HostCompiler::clang_invocations();
        auto mod = hc.load(saxpy_source(n, 2.5f));
        CHECK(HostCompiler::clang_invocations() == before + 1);
        CHECK(!mod->stats().cache_hit);
        CHECK(mod->stats().object_bytes > 0);
        std::vector<float> x(n), y(n), want(n);
        std::mt19937 rng(n);
        std::uniform_real_distribution<float> dist(-1, 1);
        for (int i = 0; i < n; ++i) {
            x[i] = dist(rng);
            y[i] = dist(rng);
            want[i] = 2.5f * x[i] + y[i];
        }
        runtime::HostBackend backend;
        runtime::HostStream s(backend);
        runtime::KernelHandle k;
        k.kind = runtime::BackendKind::host;
        k.host = reinterpret_cast<kiln_host_entry>(mod->entry("saxpy"));
        k.name = "saxpy";
        s.launch(k, runtime::LaunchDims{}, SaxpyArgs{x.data(), y.data()});
        s.synchronize();
        for (int i = 0; i < n; ++i) REQUIRE(y[i] == doctest::Approx(want[i]).epsilon(1e-6));
        // In-process memo: same source, same module, no second front-end run.
        auto again = hc.load(saxpy_source(n, 2.5f));
        CHECK(again.get() == mod.get());
        CHECK(HostCompiler::clang_invocations() == before + 1);
        CHECK_THROWS_AS(mod->entry("nope"), NotFound);
    }
}

TEST_CASE("keys cover source, headers, entries and target") {
    HostCompiler native({});
    HostCompiler generic({HostTarget::for_cpu("x86-64"), nullptr});
    auto a = saxpy_source(16, 1.0f);
    auto k = native.key(a);
    CHECK(native.key(saxpy_source(16, 1.0f)) == k);
    CHECK(native.key(saxpy_source(17, 1.0f)) != k);
    auto h = a;
    h.headers[0].second += "\n";
    CHECK(native.key(h) != k);
    auto e = a;
    e.entries.push_back("other");
    CHECK(native.key(e) != k);
    CHECK(generic.key(a) != k);
    // Descriptor columns are not part of the key (the key decides hits; columns are for listing).
    auto c = a;
    c.columns.mode = "whatever";
    CHECK(native.key(c) == k);
    // No absolute paths in the keyed options.
    for (const auto& o : native.canonical_options()) CHECK(o.find("/usr") == std::string::npos);
}

TEST_CASE("clang errors name the template and the problem") {
    HostCompiler hc({});
    auto s = saxpy_source(8, 1.0f);
    s.source += "\nint broken( { \n";
    try {
        hc.load(s);
        FAIL("expected a compile error");
    } catch (const HostCompileError& e) {
        std::string msg = e.what();
        CHECK(msg.find("clang failed") != std::string::npos);
        CHECK(msg.find("kernel.cpp:") != std::string::npos);
        CHECK(msg.find("/kiln-host-templates") == std::string::npos);
    }
    // Only the listed headers are visible: nothing from the system include path.
    auto sys = saxpy_source(8, 1.0f);
    sys.source = "#include <vector>\n" + sys.source;
    CHECK_THROWS_WITH_AS(hc.load(sys), doctest::Contains("'vector' file not found"), HostCompileError);
    // A failed compile is not memoised: fixing nothing and retrying fails again, cleanly.
    CHECK_THROWS_AS(hc.load(s), HostCompileError);
    // A missing entry point is reported.
    auto missing = saxpy_source(8, 1.0f);
    missing.entries = {"not_there"};
    CHECK_THROWS_WITH_AS(hc.load(missing), doctest::Contains("not_there"), HostCompileError);
}

TEST_CASE("clang's builtin headers come from the LLVM install") {
    HostCompiler hc({});
    auto s = saxpy_source(12, 1.5f);
    // The prelude's own typedefs and the builtin headers agree.
    s.source = "#include <stdint.h>\n#include <stddef.h>\n" + s.source +
               "\nextern \"C\" uintptr_t kiln_test_size() { return sizeof(max_align_t) + sizeof(int64_t); }\n";
    s.entries.push_back("kiln_test_size");
    auto mod = hc.load(s);
    auto fn = reinterpret_cast<uintptr_t (*)()>(mod->entry("kiln_test_size"));
    CHECK(fn() == sizeof(std::max_align_t) + 8);
}

TEST_CASE("a compiler for another CPU builds objects but never loads them") {
    HostTarget here = HostTarget::detect();
    HostTarget other = here;
    bool has_missing = false;
    for (auto& f : other.features)
        if (f[0] == '-') {
            f[0] = '+';
            has_missing = true;
        }
    if (!has_missing) return;  // nothing this machine lacks
    other.cpu = here.cpu;
    HostCompiler hc({other, nullptr});
    CHECK(!hc.native());
    CHECK_THROWS_WITH_AS(hc.load(saxpy_source(8, 1.0f)), doctest::Contains("cannot load code"), HostCompileError);
}

TEST_CASE("concurrent loads of one key compile once") {
    HostCompiler hc({});
    uint64_t before = HostCompiler::clang_invocations();
    std::vector<std::thread> ts;
    std::vector<const HostKernelModule*> got(4);
    std::atomic<int> errors{0};
    for (int i = 0; i < 4; ++i)
        ts.emplace_back([&, i] {
            try {
                got[i] = hc.load(saxpy_source(333, 3.0f)).get();
            } catch (const std::exception&) {
                errors.fetch_add(1);
            }
        });
    for (auto& t : ts) t.join();
    REQUIRE(errors.load() == 0);
    CHECK(HostCompiler::clang_invocations() == before + 1);
    for (int i = 1; i < 4; ++i) CHECK(got[i] == got[0]);
}
