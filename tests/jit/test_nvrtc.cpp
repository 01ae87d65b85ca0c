// NVRTC compiles real kiln templates to cubins without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "jit/family.hpp"
#include "jit/families/dequant_gemv.hpp"
#include "jit/families/moe_routing.hpp"
#include "jit/kernel_key.hpp"
#include "jit/nvrtc.hpp"

using namespace kiln::jit;

namespace {

NvrtcOutput compile(const KernelDescriptor& d) {
    const Family& f = builtin_families().get(d.family.view());
    KernelRecipe r = make_recipe(f, f.canonicalize(d), TemplateStore::instance());
    return Nvrtc::instance().compile(nvrtc_program(r, locate_cuda_headers()));
}

bool contains(const std::vector<uint8_t>& hay, const std::string& needle) {
    return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

// ELF64, little endian, e_machine EM_CUDA (190).
void check_cubin(const NvrtcOutput& out) {
    REQUIRE(out.cubin.size() > 64);
    CHECK(std::memcmp(out.cubin.data(), "\x7f" "ELF", 4) == 0);
    CHECK(out.cubin[4] == 2);  // ELFCLASS64
    CHECK(out.cubin[5] == 1);  // little endian
    uint16_t machine = 0;
    std::memcpy(&machine, out.cubin.data() + 18, 2);
    CHECK(machine == 190);
    CHECK(out.lowered_name.rfind("_Z", 0) == 0);
    CHECK(contains(out.cubin, out.lowered_name));
    CHECK(contains(out.cubin, ".text." + out.lowered_name));
}

}  // namespace

TEST_CASE("NVRTC is found and reports its version") {
    Nvrtc& n = Nvrtc::instance();
    CHECK(n.major() >= 13);
    CHECK(n.identity().rfind("nvrtc-", 0) == 0);
    std::vector<int> archs = n.supported_archs();
    CHECK(std::find(archs.begin(), archs.end(), 90) != archs.end());
}

TEST_CASE("moe_routing compiles to an sm_90a cubin holding the kernel") {
    NvrtcOutput out = compile(MoeRoutingFamily::descriptor(64, 8, Target::sm(90, 'a')));
    check_cubin(out);
    CHECK(out.lowered_name.find("moe_routing_indexed") != std::string::npos);
}

TEST_CASE("dequant_gemv compiles to an sm_90a cubin holding the kernel") {
    NvrtcOutput out = compile(DequantGemvFamily::descriptor(4, 256, 512, Target::sm(90, 'a')));
    check_cubin(out);
    CHECK(out.lowered_name.find("dequant_gemv_int4_g32") != std::string::npos);
}

TEST_CASE("compiles are deterministic and depend on the target") {
    KernelDescriptor d = MoeRoutingFamily::descriptor(32, 4, Target::sm(90, 'a'), 16, 8);
    NvrtcOutput a = compile(d), b = compile(d);
    CHECK(a.cubin == b.cubin);
    d.target = Target::sm(80);
    NvrtcOutput c = compile(d);
    check_cubin(c);
    CHECK(c.cubin != a.cubin);
}

TEST_CASE("a compile error carries NVRTC's log") {
    NvrtcProgram p;
    p.file_name = "broken.cu";
    p.source = "#include \"device/prelude.cuh\"\n__global__ void k() { undeclared_thing(); }\n";
    p.headers = collect_template_headers(p.source, TemplateStore::instance());
    p.name_expr = "&k";
    p.options = realize(canonical_options(Target::sm(90, 'a')), locate_cuda_headers());
    try {
        Nvrtc::instance().compile(p);
        FAIL("expected CompileError");
    } catch (const CompileError& e) {
        CHECK(e.log().find("undeclared_thing") != std::string::npos);
        CHECK(std::string(e.what()).find("broken.cu") != std::string::npos);
        CHECK(std::string(e.what()).find("undeclared_thing") != std::string::npos);
    }
}

TEST_CASE("canonical options hold no paths; realize substitutes the header dirs") {
    std::vector<std::string> c = canonical_options(Target::sm(90, 'a'));
    for (const auto& o : c) CHECK(o.find('/') == std::string::npos);
    CHECK(std::find(c.begin(), c.end(), "--gpu-architecture=sm_90a") != c.end());
    CudaHeaders h{"/x/include", "/x/include/cccl", 13000};
    std::vector<std::string> r = realize(c, h);
    CHECK(std::find(r.begin(), r.end(), "-I/x/include") != r.end());
    CHECK(std::find(r.begin(), r.end(), "-I/x/include/cccl") != r.end());
    CHECK_THROWS_AS(canonical_options(Target::host_target()), kiln::InvalidArgument);
}

TEST_CASE("KILN_JIT_LINEINFO adds source lines to the options (and so to the kernel key)") {
    const auto has_lineinfo = [](const std::vector<std::string>& o) {
        return std::find(o.begin(), o.end(), "--generate-line-info") != o.end();
    };
    ::unsetenv("KILN_JIT_LINEINFO");
    CHECK(!has_lineinfo(canonical_options(Target::sm(90, 'a'))));
    ::setenv("KILN_JIT_LINEINFO", "1", 1);
    CHECK(has_lineinfo(canonical_options(Target::sm(90, 'a'))));
    ::setenv("KILN_JIT_LINEINFO", "off", 1);
    CHECK(!has_lineinfo(canonical_options(Target::sm(90, 'a'))));
    ::setenv("KILN_JIT_LINEINFO", "sometimes", 1);
    CHECK_THROWS_AS(canonical_options(Target::sm(90, 'a')), kiln::InvalidArgument);
    ::unsetenv("KILN_JIT_LINEINFO");
}
