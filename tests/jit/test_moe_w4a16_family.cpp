// The moe_w4a16 families (CPU): route, decode, decode_fused, prefill, combine and dequant descriptors
// canonicalise to their documented configurations (named fields) and refuse what the kernels cannot do, the
// families' shared-memory arithmetic matches the templates', the host target maps each to its GEMMs, and
// NVRTC compiles every kernel to an sm_90a cubin without a GPU. The sizes and default stages are checked
// against the templates' own constexpr functions by static assertions compiled into those NVRTC programs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "jit/families/moe_w4a16_combine.hpp"
#include "jit/families/moe_w4a16_common.hpp"
#include "jit/families/moe_w4a16_decode.hpp"
#include "jit/families/moe_w4a16_decode_fused.hpp"
#include "jit/families/moe_w4a16_dequant.hpp"
#include "jit/families/moe_w4a16_prefill.hpp"
#include "jit/families/moe_w4a16_route.hpp"
#include "jit/kernel_key.hpp"
#include "jit/nvrtc.hpp"
#include "runtime/error.hpp"

using namespace kiln::jit;
using moe::Activation;
using moe::Matrix;
using moe::MatrixShape;

namespace {

const Target k_h200 = Target::sm(90, 'a');
const Target k_host = Target::host_target();
constexpr WeightFormat k_int4 = WeightFormat::int4_g32_bf16, k_mxfp4 = WeightFormat::mxfp4_g32_e8m0;
constexpr Activation silu = Activation::silu_glu, situ = Activation::situ_glu;

// An expert's matrices as the weights repacking lays them out (model/weights/moe_w4a16.hpp): gate_up of
// intermediate I over hidden H has 2 x I padded to 64 rows (gate and up interleaved); down [H, I] has H
// padded to 128 rows.
MatrixShape gate_up(WeightFormat f, int inter, int hidden, bool wide = false) {
    return {f, 2 * moe::round_up(inter, 64), hidden, wide};
}
MatrixShape down(WeightFormat f, int hidden, int inter, bool wide = false) {
    return {f, moe::round_up(hidden, 128), inter, wide};
}

using DecodeC = MoeW4A16DecodeConfig;
using FusedC = MoeW4A16DecodeFusedConfig;
using PrefillC = MoeW4A16PrefillConfig;
DecodeC dc(const KernelDescriptor& d) { return d.config.as<DecodeC>(); }
FusedC fc(const KernelDescriptor& d) { return d.config.as<FusedC>(); }
PrefillC pc(const KernelDescriptor& d) { return d.config.as<PrefillC>(); }

const Family& family(const KernelDescriptor& d) { return builtin_families().get(d.family.view()); }
KernelDescriptor canon(const KernelDescriptor& d) { return family(d).canonicalize(d); }
uint32_t smem(const KernelDescriptor& d) { return family(d).max_dynamic_smem(d); }
std::string name_expr(const KernelDescriptor& d) { return family(d).device_source(d).name_expr; }
size_t template_headers(const KernelDescriptor& d) {
    return collect_template_headers(family(d).device_source(d).source, TemplateStore::instance()).size();
}

KernelDescriptor decode(Matrix m, const MatrixShape& w, Activation act, int block_m, bool dynamic = false,
                        bool rows = false, int block_k = 0, int stages = 0, Target t = k_h200) {
    return MoeW4A16DecodeFamily::descriptor(m, w, act, block_m, t, dynamic, rows, block_k, stages);
}
KernelDescriptor prefill(Matrix m, const MatrixShape& w, Activation act, MoeMma mma = MoeMma::sync, bool wide = false,
                         int block_m = 64, Target t = k_h200) {
    return MoeW4A16PrefillFamily::descriptor(m, w, act, t, mma, wide, block_m);
}
KernelDescriptor fused(const MatrixShape& gu, Activation act, int block_m, int stages = 0, int block_k = 0) {
    return MoeW4A16DecodeFusedFamily::descriptor(gu, act, block_m, k_h200, stages, block_k);
}
KernelDescriptor route(int experts, int block_m, Target t = k_h200) {
    return MoeW4A16RouteFamily::descriptor(experts, block_m, t);
}

// `checks`: device code appended to the translation unit (static assertions on the templates).
// `ptxas_report`: ptxas's resource report and performance advisories in the log.
NvrtcOutput compile(const KernelDescriptor& d, const std::string& checks = {}, bool ptxas_report = false) {
    KernelRecipe r = make_recipe(family(d), canon(d), TemplateStore::instance());
    NvrtcProgram p = nvrtc_program(r, locate_cuda_headers());
    p.source += checks;
    if (ptxas_report) p.options.push_back("--ptxas-options=--verbose");
    return Nvrtc::instance().compile(p);
}

std::string dev_format(WeightFormat f) { return moe::device_format(f); }

// The template's shared memory and default stages for a mma.sync prefill descriptor must equal the family's.
std::string prefill_smem_checks(const KernelDescriptor& d) {
    const PrefillC c = pc(d);
    const int recs = c.block_k / 64;
    const std::string args = dev_format(d.weight_format) + ", 8, " + std::to_string(recs);
    return "\nstatic_assert(kiln_dev::moe::prefill_smem_bytes<" + args + ">(" + std::to_string(c.stages) +
           ") == " + std::to_string(smem(d)) + ", \"family prefill smem\");\n" +
           "static_assert(kiln_dev::moe::prefill_default_stages<" + args + ">() == " +
           std::to_string(moe::prefill_default_stages(d.weight_format, recs)) + ", \"family prefill stages\");\n";
}

// The same for a warpgroup-MMA prefill descriptor.
std::string prefill_wgmma_smem_checks(const KernelDescriptor& d) {
    const PrefillC c = pc(d);
    const int recs = c.block_k / 64, par = c.wide ? 2 : 1;
    const std::string args = dev_format(d.weight_format) + ", " + std::to_string(recs) + ", " + std::to_string(par);
    return "\nstatic_assert(kiln_dev::moe::prefill_wgmma_smem_bytes<" + args + ">(" + std::to_string(c.stages) +
           ") == " + std::to_string(smem(d)) + ", \"family wgmma prefill smem\");\n" +
           "static_assert(kiln_dev::moe::prefill_wgmma_default_stages<" + args + ">() == " +
           std::to_string(moe::prefill_wgmma_default_stages(d.weight_format, recs, par)) +
           ", \"family wgmma prefill stages\");\n";
}

// The same for the warp-specialised kernel.
std::string prefill_ws_smem_checks(const KernelDescriptor& d) {
    const PrefillC c = pc(d);
    const bool dn = c.matrix == static_cast<uint8_t>(Matrix::down);
    const int res = moe::prefill_ws_resident_records(d.weight_format, c.block_m, d.k, dn);
    return "\nstatic_assert(kiln_dev::moe::prefill_ws_smem_bytes<" + dev_format(d.weight_format) + ", " +
           std::to_string(c.block_m) + ", " + std::to_string(res) + ", " + (dn ? "2" : "0") + ">(" +
           std::to_string(c.stages) + ") == " + std::to_string(smem(d)) + ", \"family ws prefill smem\");\n";
}

// The same for a decode GEMM or fused decode descriptor; for the fused kernel also the routing area, its
// scratch and the teams' area as the host sizes a call (K2 EP8 decode 20, K3 B=128, a small call).
std::string decode_smem_checks(const KernelDescriptor& d) {
    const bool is_fused = d.family.view() == MoeW4A16DecodeFusedFamily::k_name;
    const int bm = is_fused ? fc(d).block_m : dc(d).block_m, stages = is_fused ? fc(d).stages : dc(d).stages;
    const int tiles = bm / 8, recs = (is_fused ? fc(d).block_k : dc(d).block_k) / 64;
    const std::string args = dev_format(d.weight_format) + ", " + std::to_string(tiles) + ", " + std::to_string(recs);
    const std::string ring = "kiln_dev::moe::decode_smem_bytes<" + args + ">(" + std::to_string(stages) + ")";
    const uint32_t family_ring = moe::decode_smem(d.weight_format, tiles, stages, recs);
    if (!is_fused) REQUIRE(family_ring == smem(d));
    std::string s = "\nstatic_assert(" + ring + " == " + std::to_string(family_ring) + ", \"family decode smem\");\n" +
                    "static_assert(kiln_dev::moe::decode_default_stages<" + args + ">() == " +
                    std::to_string(moe::decode_default_stages(d.weight_format, tiles, recs)) +
                    ", \"family decode stages\");\n";
    if (!is_fused) return s;
    const int slot_cases[][2] = {{1280, 48}, {2048, 112}, {40, 16}};
    for (const auto& sc : slot_cases) {
        const int slots = sc[0], experts = sc[1];
        const int cap = slots / bm + std::min(experts, slots) + 1;
        const uint32_t host = MoeW4A16DecodeFusedFamily::call_smem(d, slots, experts, cap, 8);
        REQUIRE(host > 0);
        s += "static_assert(" + ring + " + kiln_dev::moe::fused_route_area_bytes(" + std::to_string(cap) + ", " +
             std::to_string(bm) + ") == " + std::to_string(host) + ", \"family fused call smem\");\n" +
             "static_assert(kiln_dev::moe::fused_route_scratch_bytes(" + std::to_string(slots) + ", " +
             std::to_string(experts) + ") <= " + ring + ", \"fused routing scratch\");\n";
        // the teams' claim slots and partial sums (k_groups 2 and 4) after the routing area
        for (const int kg : {2, 4}) {
            if (!MoeW4A16DecodeFusedFamily::k_groups_ok(d, kg)) continue;
            const uint32_t with = MoeW4A16DecodeFusedFamily::call_smem(d, slots, experts, cap, 8, kg);
            if (with == 0) continue;
            s += "static_assert(kiln_dev::moe::fused_team_area_bytes(" + std::to_string(kg) + ", " +
                 std::to_string(tiles) + ") == " + std::to_string(with - host) + ", \"family fused team area\");\n";
        }
    }
    return s;
}

void check_cubin(const NvrtcOutput& out, const std::string& kernel) {
    REQUIRE(out.cubin.size() > 64);
    CHECK(std::memcmp(out.cubin.data(), "\x7f" "ELF", 4) == 0);
    CHECK(out.lowered_name.find(kernel) != std::string::npos);
}

// ptxas must keep the wgmmas asynchronous (a branch around them serialises every one: advisory C7518) and
// spill nothing.
void check_wgmma_report(const NvrtcOutput& out) {
    CAPTURE(out.log);
    CHECK(out.log.find("Used ") != std::string::npos);
    CHECK(out.log.find("serialized") == std::string::npos);
    CHECK(out.log.find(" 0 bytes spill stores") != std::string::npos);
}

}  // namespace

TEST_CASE("moe_w4a16: decode descriptors for the K2 and K3 layers") {
    const MatrixShape gu = gate_up(k_int4, 2048, 7168), dn = down(k_int4, 7168, 2048);
    const KernelDescriptor g = decode(Matrix::gate_up, gu, silu, 8);
    CHECK(g.family.view() == "moe_w4a16_decode");
    CHECK(g.mode.view() == "indexed");
    CHECK(g.n == 4096);
    CHECK(g.k == 7168);
    CHECK(g.weight_format == k_int4);
    CHECK(g.act_dtype == kiln::runtime::DType::bf16);
    CHECK(dc(g).matrix == static_cast<uint8_t>(Matrix::gate_up));
    CHECK(dc(g).block_m == 8);
    CHECK(dc(g).block_k == 256);  // four records per stage where K and a two-stage ring allow
    CHECK(dc(g).stages == 2);
    CHECK(to_string(g) ==
          "moe_w4a16_decode/indexed m=0 n=4096 k=7168 e=0 topk=0 w=int4_g32_bf16 a=bf16 target=sm_90a "
          "cfg=matrix=gate_up,act=silu_glu,block_m=8,stages=2,block_k=256,dynamic=0,rows=0,wide_scale=0,mask_k=0");
    const KernelDescriptor g128 = decode(Matrix::gate_up, gu, silu, 8, false, false, 128);
    CHECK(dc(g128).block_k == 128);
    CHECK(dc(g128).stages >= 4);  // the deepest ring that fits
    CHECK(dc(decode(Matrix::gate_up, gu, silu, 32)).block_k == 128);
    CHECK(canon(g) == g);  // idempotent
    CHECK(smem(g) <= moe::k_smem_limit);
    CHECK(name_expr(g).find("moe_w4a16_decode<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 1,") !=
          std::string::npos);
    // the template, the shared header and the prelude; the parameter structs and their types
    CHECK(template_headers(g) == 6);

    const KernelDescriptor d = decode(Matrix::down, dn, silu, 16);
    CHECK(d.n == 7168);
    CHECK(d.k == 2048);
    CHECK(dc(d).matrix == static_cast<uint8_t>(Matrix::down));
    CHECK(dc(d).block_m == 16);
    CHECK(name_expr(d).find(", 1, 0, false, 2,") != std::string::npos);

    const KernelDescriptor k = decode(Matrix::gate_up, gate_up(k_mxfp4, 3072, 3584), situ, 8);
    CHECK(k.weight_format == k_mxfp4);
    CHECK(dc(k).act == static_cast<uint8_t>(situ));
    CHECK(name_expr(k).find("kFormatMxfp4, false, 0, 1, false, 1,") != std::string::npos);
}

TEST_CASE("moe_w4a16: the fused decode kernel and its per-call shared memory") {
    const MatrixShape gu = gate_up(k_int4, 2048, 7168);
    const KernelDescriptor f = fused(gu, silu, 8);
    CHECK(f.family.view() == "moe_w4a16_decode_fused");
    CHECK(f.n == 4096);
    CHECK(f.k == 7168);
    CHECK(canon(f) == f);
    CHECK(MoeW4A16DecodeFusedFamily().device_only());
    CHECK(name_expr(f).find("moe_w4a16_decode_fused<kiln_dev::moe::kFormatInt4, false, 0, false, 1,") !=
          std::string::npos);
    // four records per stage and a two-stage ring by default where K, down's K and shared memory allow
    CHECK(fc(f).block_k == 256);
    CHECK(fc(f).stages == 2);
    CHECK(name_expr(f).find(", 1, 2, 4>") != std::string::npos);
    const KernelDescriptor f128 = fused(gu, silu, 8, 4, 128);
    CHECK(fc(f128).block_k == 128);
    CHECK(fc(f128).stages == 4);
    CHECK(canon(f128) == f128);
    CHECK(fc(fused(gu, silu, 32)).block_k == 128);  // 32 rows: no room for two 256-input stages
    // a call's shared memory: the ring, then its routing (m-block descriptors, the slot of every sorted row);
    // refused (0) past 65,535 slots, top-k 32, or where the routing does not fit
    const uint32_t ring = moe::decode_smem(f.weight_format, 1, fc(f).stages, fc(f).block_k / 64);
    CHECK(smem(f) == moe::k_smem_limit);
    using F = MoeW4A16DecodeFusedFamily;
    // 209 m-blocks x (8 + 8 x 2) bytes rounded up to 16, two flags
    CHECK(F::call_smem(f, 1280, 48, 1280 / 8 + 48 + 1, 8) == ring + 5024 + 16);
    CHECK(F::call_smem(f, 65536, 48, 16, 8) == 0);
    CHECK(F::call_smem(f, 1280, 48, 209, 33) == 0);
    CHECK(F::call_smem(f, 1280, 48, 20000, 8) == 0);  // 20,000 m-blocks: no room
    // items shared by 2 or 4 warp groups: the claim slots (16 bytes) and 1 KB of partial sums per token tile for
    // each warp of groups 1..G-1
    CHECK(F::call_smem(f, 1280, 48, 209, 8, 4) == ring + 5024 + 16 + 16 + 12 * 1024);
    CHECK(F::call_smem(f, 1280, 48, 209, 8, 2) == ring + 5024 + 16 + 16 + 8 * 1024);
    CHECK(F::k_groups_ok(f, 4));
    CHECK_FALSE(F::k_groups_ok(f, 3));
    // m-blocks of 32 rows keep one group per item
    const KernelDescriptor f32 = fused(gu, silu, 32);
    CHECK(F::k_groups_ok(f32, 1));
    CHECK_FALSE(F::k_groups_ok(f32, 2));
    CHECK_THROWS_AS(F::call_smem(f, 1280, 48, 209, 8, 3), kiln::InvalidArgument);
    CHECK_THROWS_AS(F::call_smem(decode(Matrix::gate_up, gu, silu, 8, true), 1280, 48, 209, 8),
                    kiln::InvalidArgument);  // not the fused kernel
    CHECK_THROWS_AS(F::k_groups_ok(decode(Matrix::gate_up, gu, silu, 8, true), 1), kiln::InvalidArgument);
    CHECK_THROWS_AS(fused(gu, silu, 8, 0, 192), kiln::InvalidArgument);
    CHECK_THROWS_AS(fused(gu, silu, 8, 3, 256), kiln::InvalidArgument);  // three 256-input stages do not fit
    CHECK(F::fusable(4096, 7168, 256));
    CHECK_FALSE(F::fusable(4096, 7168 - 128, 256));  // K 7040 is not whole 256-input stages
    CHECK_FALSE(F::fusable(2 * 384, 7168, 256));      // nor is down's K 384
    // a device kernel: the host target runs route, decode and combine instead
    KernelDescriptor fh = f;
    fh.target = k_host;
    CHECK_THROWS_WITH_AS(canon(fh), doctest::Contains("a device kernel"), kiln::InvalidArgument);
    // down's K must be whole stages of gate_up's: intermediate 192 (down's K 192 -> 1.5 stages of 128)
    CHECK_THROWS_AS(fused(gate_up(k_int4, 192, 256), silu, 8), kiln::InvalidArgument);
    KernelDescriptor bad = f;
    bad.config = KernelConfig::of(FusedC{0, 24});
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);  // block_m 24
}

TEST_CASE("moe_w4a16: the routing of a call") {
    const KernelDescriptor r = route(112, 8);
    CHECK(r.family.view() == "moe_w4a16_route");
    CHECK(r.experts == 112);
    CHECK(r.weight_format == WeightFormat::none);
    CHECK(r.config.as<MoeW4A16RouteConfig>().block_m == 8);
    CHECK(smem(r) == 3 * 4 * 112);
    CHECK(canon(r) == r);
    CHECK(moe_w4a16_route_ctas(8) == 1);
    CHECK(moe_w4a16_route_ctas(4095) == 1);
    CHECK(moe_w4a16_route_ctas(16384) == 8);
    CHECK(moe_w4a16_route_ctas(int64_t(1) << 20) == 32);
    CHECK(name_expr(r) == "&kiln_dev::moe::moe_w4a16_routing<8>");
    CHECK(name_expr(route(48, 64)) == "&kiln_dev::moe::moe_w4a16_routing<64>");
    // m-blocks of 128 / 192 rows for the warp-specialised prefill (device target)
    CHECK(route(384, 192).config.as<MoeW4A16RouteConfig>().block_m == 192);
    CHECK(route(384, 128).config.as<MoeW4A16RouteConfig>().block_m == 128);
    CHECK_THROWS_AS(route(384, 96), kiln::InvalidArgument);
    CHECK_THROWS_AS(route(384, 128, k_host), kiln::InvalidArgument);
    CHECK(route(8, 64, k_host).config.as<MoeW4A16RouteConfig>().block_m == 64);
    CHECK_THROWS_AS(route(0, 8), kiln::InvalidArgument);
    CHECK_THROWS_AS(route(moe::k_max_experts + 1, 8), kiln::InvalidArgument);
    KernelDescriptor w = r;
    w.weight_format = k_int4;
    CHECK_THROWS_AS(canon(w), kiln::InvalidArgument);  // takes no weights
}

TEST_CASE("moe_w4a16: dynamic schedule, rows mode of down and the combine kernel") {
    const MatrixShape gu = gate_up(k_int4, 2048, 7168), dn = down(k_int4, 7168, 2048);
    const KernelDescriptor st = decode(Matrix::gate_up, gu, silu, 8);
    const KernelDescriptor g = decode(Matrix::gate_up, gu, silu, 8, true);
    CHECK(dc(g).dynamic == 1);
    CHECK(dc(st).dynamic == 0);
    CHECK(!(g == st));  // a different kernel, a different cache key
    CHECK(canon(g) == g);
    CHECK(dc(g).matrix == static_cast<uint8_t>(Matrix::gate_up));
    // the item slots cost shared memory: never more stages than the static kernel, and it still fits
    CHECK(dc(g).stages <= dc(st).stages);
    CHECK(smem(g) <= moe::k_smem_limit);
    CHECK(smem(g) > smem(st) - 20000u);
    CHECK(name_expr(g).find(", 1>") != std::string::npos);
    CHECK(name_expr(st).find(", 0>") != std::string::npos);

    const KernelDescriptor r = decode(Matrix::down, dn, silu, 32, false, true);
    CHECK(dc(r).rows == 1);
    CHECK(dc(r).matrix == static_cast<uint8_t>(Matrix::down));
    CHECK(name_expr(r).find("kFormatInt4, false, 2, 0, false, 4,") != std::string::npos);
    CHECK_THROWS_WITH_AS(decode(Matrix::gate_up, gu, silu, 8, false, true),
                         doctest::Contains("only down has a rows mode"), kiln::InvalidArgument);

    const KernelDescriptor c = MoeW4A16CombineFamily::descriptor(k_h200);
    CHECK(c.family.view() == "moe_w4a16_combine");
    CHECK(canon(c) == c);
    CHECK(smem(c) == 0);
    CHECK(name_expr(c) == "&kiln_dev::moe::moe_w4a16_combine");
    CHECK(MoeW4A16CombineFamily().config_fields().empty());
    KernelDescriptor loose = c;
    loose.config.bytes[0] = 1;  // nothing is baked in: canonicalised away
    loose.n = 512;
    CHECK(canon(loose) == c);
    KernelDescriptor bad = c;
    bad.weight_format = k_int4;
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);  // takes no weights
    bad = c;
    bad.mode = ShortName("grouped");
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
}

TEST_CASE("moe_w4a16: bad decode descriptors are refused") {
    const MatrixShape dn = down(k_int4, 512, 256);
    const KernelDescriptor g = decode(Matrix::down, dn, silu, 8);
    KernelDescriptor bad = g;
    DecodeC c = dc(g);
    c.block_m = 24;
    bad.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    CHECK_THROWS_AS(decode(Matrix::gate_up, gate_up(k_int4, 256, 512), silu, 64),
                    kiln::InvalidArgument);  // block_m 64 is the prefill GEMM's, not the decode kernel's
    bad = g;
    bad.n = 200;  // not a whole number of 128-row super-blocks
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    bad = g;
    bad.k = 100;
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    bad = g;
    bad.weight_format = WeightFormat::none;
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    bad = g;
    bad.target = Target::sm(89);
    CHECK_THROWS_WITH_AS(canon(bad), doctest::Contains("needs sm_90a"), kiln::InvalidArgument);
    bad.target = Target::sm(100, 'a');
    CHECK_THROWS_WITH_AS(canon(bad), doctest::Contains("no tuned configuration"), kiln::InvalidArgument);
    bad = g;
    c = dc(g);
    c.matrix = 2;  // neither gate_up nor down
    bad.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    bad = g;
    c = dc(g);
    c.act = static_cast<uint8_t>(situ);  // the activation belongs to gate_up
    bad.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    bad = g;
    c = dc(g);
    c.stages = 20;
    bad.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(bad), kiln::InvalidArgument);
    CHECK_THROWS_AS(decode(Matrix::down, dn, silu, 8, false, false, 96), kiln::InvalidArgument);  // block_k 96
    CHECK_THROWS_AS(decode(Matrix::down, down(k_int4, 512, 192), silu, 8, false, false, 128),
                    kiln::InvalidArgument);  // 128 does not divide K 192
    // The host target has its own implementation: no pipeline, only what its GEMM bakes in.
    bad = g;
    bad.target = k_host;
    const KernelDescriptor host = canon(bad);
    CHECK(host.target.is_host());
    CHECK(dc(host).stages == 0);
    CHECK(dc(host).block_k == 0);
    CHECK(dc(host).block_m == 8);
    CHECK(canon(host) == host);
}

TEST_CASE("moe_w4a16: odd K takes the masked variant, wide MXFP4 scales the exact path") {
    const KernelDescriptor g = decode(Matrix::gate_up, gate_up(k_int4, 96, 224), silu, 8);
    CHECK(dc(g).mask_k == 1);
    CHECK(dc(g).block_k == 256);  // K padded to 256
    CHECK(MoeW4A16DecodeFamily().field("mask_k")->derived);
    KernelDescriptor unmasked = g;  // derived from K, whatever the input says
    DecodeC c = dc(g);
    c.mask_k = 0;
    unmasked.config = KernelConfig::of(c);
    CHECK(canon(unmasked) == g);
    const KernelDescriptor d = decode(Matrix::down, down(k_mxfp4, 256, 192, true), situ, 8);
    CHECK(dc(d).wide_scale == 1);
    CHECK(dc(d).act == 0);       // the activation belongs to gate_up
    CHECK(dc(d).block_k == 64);  // K_pad 192 is not a multiple of 128
    CHECK(name_expr(d).find("kFormatMxfp4, true, 1,") != std::string::npos);
    // INT4 has no wide scales: the field is dropped
    const KernelDescriptor i = decode(Matrix::down, down(k_int4, 256, 192, true), situ, 8);
    CHECK(dc(i).wide_scale == 0);
    const KernelDescriptor wd = MoeW4A16DequantFamily::descriptor(down(k_mxfp4, 256, 192, true), k_h200);
    CHECK(wd.config.as<MoeW4A16DequantConfig>().wide_scale == 1);
    CHECK(name_expr(wd) == "&kiln_dev::moe::moe_w4a16_dequant<kiln_dev::moe::kFormatMxfp4, true, 8>");
    CHECK(MoeW4A16DequantFamily::descriptor(down(k_mxfp4, 256, 192, true), k_host).config == KernelConfig{});
}

TEST_CASE("moe_w4a16: NVRTC compiles every decode, routing, combine and dequant kernel to sm_90a") {
    const MatrixShape gu = gate_up(k_int4, 2048, 7168), dn = down(k_mxfp4, 3584, 3072), odd = gate_up(k_int4, 96, 224);
    const KernelDescriptor kernels[] = {
        decode(Matrix::gate_up, gu, silu, 8),
        decode(Matrix::down, dn, situ, 16),
        decode(Matrix::gate_up, odd, situ, 32),
        decode(Matrix::gate_up, gu, silu, 16, true),
        decode(Matrix::down, dn, situ, 32, true, true),
        fused(gu, silu, 8),
        fused(gu, silu, 16),
    };
    for (const KernelDescriptor& d : kernels) {
        CAPTURE(to_string(d));
        check_cubin(compile(d, decode_smem_checks(d)), "moe_w4a16_decode");
    }
    check_cubin(compile(MoeW4A16CombineFamily::descriptor(k_h200)), "moe_w4a16_combine");
    check_cubin(compile(route(384, 16)), "moe_w4a16_routing");
    check_cubin(compile(MoeW4A16DequantFamily::descriptor(dn, k_h200)), "moe_w4a16_dequant");
}

TEST_CASE("moe_w4a16: prefill GEMM descriptors (block_m 64, decode layout)") {
    const MatrixShape gu = gate_up(k_int4, 2048, 7168), dn = down(k_mxfp4, 3584, 3072);
    const KernelDescriptor g = prefill(Matrix::gate_up, gu, silu);
    CHECK(g.family.view() == "moe_w4a16_prefill");
    CHECK(pc(g).matrix == static_cast<uint8_t>(Matrix::gate_up));
    CHECK(pc(g).mma == static_cast<uint8_t>(MoeMma::sync));
    CHECK(g.n == 4096);
    CHECK(g.k == 7168);
    CHECK(pc(g).block_m == 64);
    CHECK(pc(g).block_n == 128);
    CHECK(pc(g).block_k == 128);  // K 7168 is a multiple of 128: two records per K step
    CHECK(pc(g).warps == 8);
    CHECK(pc(g).ctas_per_sm == 2);
    CHECK(pc(g).stages == 6);  // the deepest INT4 ring of two-record slots under 112 KB (107,648 B)
    CHECK(smem(g) == 107648u);
    CHECK(canon(g) == g);
    CHECK(MoeW4A16PrefillFamily().preferred_smem_carveout(g) == 100);
    CHECK(name_expr(g) ==
          "&kiln_dev::moe::moe_w4a16_prefill<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 8, 6, 1, 2>");
    CHECK(template_headers(g) == 7);  // the decode template's and the prefill template

    const KernelDescriptor d = prefill(Matrix::down, dn, situ);
    CHECK(pc(d).matrix == static_cast<uint8_t>(Matrix::down));
    CHECK(pc(d).act == 0);  // the activation belongs to gate_up
    CHECK(pc(d).block_k == 128);
    CHECK(pc(d).stages == 7);
    CHECK(smem(d) <= moe::k_prefill_smem_limit);
    CHECK(smem(d) == moe::prefill_smem(k_mxfp4, 7, 2));
    CHECK(smem(d) == 113280u);
    CHECK(name_expr(d) ==
          "&kiln_dev::moe::moe_w4a16_prefill<kiln_dev::moe::kFormatMxfp4, false, 2, 0, false, 8, 7, 1, 2>");

    // K padded to 64 not a multiple of 128: one record per K step, the deeper ring of one-record slots.
    const KernelDescriptor h = prefill(Matrix::gate_up, gate_up(k_int4, 256, 320), silu);
    CHECK(pc(h).block_k == 64);
    CHECK(pc(h).stages == 16);
    CHECK(smem(h) == 110848u);
    CHECK(pc(h).mask_k == 0);
    CHECK(canon(h) == h);
    CHECK(name_expr(h) ==
          "&kiln_dev::moe::moe_w4a16_prefill<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 8, 16, 1, 1>");
    KernelDescriptor bk = h;  // block_k follows K, whatever the input says
    PrefillC c = pc(h);
    c.block_k = 128;
    bk.config = KernelConfig::of(c);
    CHECK(canon(bk) == h);
    CHECK(MoeW4A16PrefillFamily().field("block_k")->derived);

    const KernelDescriptor o = prefill(Matrix::gate_up, gate_up(k_mxfp4, 96, 224, true), situ);
    CHECK(pc(o).mask_k == 1);
    CHECK(pc(o).wide_scale == 1);
    CHECK(pc(o).block_k == 128);  // K 224 pads to 256; the second record of the last step is masked
    CHECK(name_expr(o).find("kFormatMxfp4, true, 0, 1, true, 8,") != std::string::npos);
}

TEST_CASE("moe_w4a16: warpgroup-MMA prefill descriptors (sm_90a only)") {
    const MatrixShape gu = gate_up(k_int4, 2048, 7168), dn = down(k_mxfp4, 3584, 3072);
    CHECK(moe::has_wgmma(k_h200));
    CHECK(!moe::has_wgmma(Target::sm(90)));
    CHECK(!moe::has_wgmma(Target::sm(89)));
    CHECK(!moe::has_wgmma(k_host));

    const KernelDescriptor g = prefill(Matrix::gate_up, gu, silu, MoeMma::wgmma);
    CHECK(pc(g).mma == static_cast<uint8_t>(MoeMma::wgmma));
    CHECK(pc(g).block_m == 64);
    CHECK(pc(g).block_k == 128);
    CHECK(pc(g).ctas_per_sm == 2);
    // 4 token stages of 16 KB, then 9,216-byte weight slots: five fit under 112 KB (111,744 B)
    CHECK(pc(g).stages == 5);
    CHECK(smem(g) == 111744u);
    CHECK(canon(g) == g);
    const KernelDescriptor mma = prefill(Matrix::gate_up, gu, silu);
    CHECK(!(g == mma));  // two kernels, two cache entries
    CHECK(name_expr(g) ==
          "&kiln_dev::moe::moe_w4a16_prefill_wgmma<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 5, 2, 1, 1>");
    CHECK(pc(g).block_n == 128);  // K 7168: one super-block per CTA
    CHECK(MoeW4A16PrefillFamily().device_source(g).file_name == "moe_w4a16_prefill_wgmma_gate_up.cu");

    const KernelDescriptor d = prefill(Matrix::down, dn, situ, MoeMma::wgmma);
    CHECK(name_expr(d).find("moe_w4a16_prefill_wgmma<kiln_dev::moe::kFormatMxfp4, false, 2, 0") != std::string::npos);
    CHECK(pc(d).block_n == 128);  // K 3072: 24 steps of 128 inputs: one super-block
    // Short K (TP8-sliced down): several super-blocks per CTA, at most 16 K steps each, at most n / 128.
    CHECK(moe::prefill_superblocks_per_cta(7168, 256) == 8);
    CHECK(moe::prefill_superblocks_per_cta(7168, 384) == 4);
    CHECK(moe::prefill_superblocks_per_cta(7168, 1024) == 2);
    CHECK(moe::prefill_superblocks_per_cta(7168, 2048) == 1);
    CHECK(moe::prefill_superblocks_per_cta(384, 256) == 3);
    CHECK(moe::prefill_superblocks_per_cta(96, 256) == 1);  // fewer than 128 rows: still one super-block
    CHECK(moe::prefill_ws_superblocks_per_cta(96, 256) == 1);
    const MatrixShape tp8_down = down(k_int4, 7168, 256);
    const KernelDescriptor t8 = prefill(Matrix::down, tp8_down, silu, MoeMma::wgmma);
    CHECK(pc(t8).block_n == 1024);
    CHECK(canon(t8) == t8);
    CHECK(name_expr(t8).find(", 2, 8, 1>") != std::string::npos);
    const KernelDescriptor t8_mma = prefill(Matrix::down, tp8_down, silu);
    CHECK(pc(t8_mma).block_n == 128);  // the mma.sync version keeps a super-block per CTA
    // The wide CTA (two super-blocks side by side, one CTA per SM): only where a CTA walks one super-block.
    const KernelDescriptor gw = prefill(Matrix::gate_up, gu, silu, MoeMma::wgmma, true);
    CHECK(pc(gw).wide == 1);
    CHECK(pc(gw).block_n == 256);
    CHECK(pc(gw).warps == 16);
    CHECK(pc(gw).ctas_per_sm == 1);
    CHECK(pc(gw).stages == 9);  // 64 KB of token stages + 9 x 18,432-byte weight slots under 227 KB
    CHECK(smem(gw) == 231552u);
    CHECK(canon(gw) == gw);
    CHECK(name_expr(gw).find(", 9, 2, 1, 2>") != std::string::npos);
    CHECK(prefill(Matrix::down, tp8_down, silu, MoeMma::wgmma, true) == t8);  // short K walks super-blocks instead
    KernelDescriptor wide_mma = t8_mma;  // the wide CTA is a warpgroup-MMA shape
    PrefillC c = pc(t8_mma);
    c.wide = 1;
    wide_mma.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(wide_mma), kiln::InvalidArgument);
    const KernelDescriptor h = prefill(Matrix::gate_up, gate_up(k_int4, 256, 320), silu, MoeMma::wgmma);
    CHECK(pc(h).block_k == 64);  // one record per step: a single A buffer

    // Not on other targets; a stage count under three is refused; only the prefill family has the choice.
    CHECK_THROWS_AS(prefill(Matrix::gate_up, gu, silu, MoeMma::wgmma, false, 64, Target::sm(90)),
                    kiln::InvalidArgument);
    KernelDescriptor two = g;
    c = pc(g);
    c.stages = 2;
    two.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(two), kiln::InvalidArgument);
    CHECK(MoeW4A16DecodeFamily().field("mma") == nullptr);
    // The host target runs the same computation with its own prefill GEMM: the choice does not split its cache.
    KernelDescriptor host_g = g, host_mma = mma;
    host_g.target = host_mma.target = k_host;
    CHECK(canon(host_g) == canon(host_mma));

    for (const KernelDescriptor& k : {g, d, h, t8, gw}) {
        CAPTURE(to_string(k));
        const NvrtcOutput out = compile(k, prefill_wgmma_smem_checks(k), true);
        check_cubin(out, "moe_w4a16_prefill_wgmma");
        check_wgmma_report(out);
    }
}

TEST_CASE("moe_w4a16: warp-specialised wgmma prefill descriptors (block_m 128 / 192)") {
    const MatrixShape gu = gate_up(k_int4, 256, 7168);  // K2 TP8
    const MatrixShape dn = down(k_int4, 7168, 256), dn3 = down(k_mxfp4, 3584, 384);  // K2 / K3 TP8
    const MatrixShape odd = gate_up(k_mxfp4, 160, 352);
    const auto pg = [&](const MatrixShape& w, bool is_gate_up, int bm) {
        return prefill(is_gate_up ? Matrix::gate_up : Matrix::down, w, silu, MoeMma::wgmma, false, bm);
    };
    // gate_up, K 7168: streaming, 24 KB token record + 4,608-byte weight record per slot: 7 slots, and the
    // m-block's router weights (192 floats).
    const KernelDescriptor g192 = pg(gu, true, 192);
    CHECK(MoeW4A16PrefillFamily::warp_specialised(g192));
    CHECK(pc(g192).block_m == 192);
    CHECK(pc(g192).stages == 7);
    CHECK(pc(g192).warps == 12);
    CHECK(pc(g192).ctas_per_sm == 1);
    CHECK(pc(g192).block_n == 128);
    CHECK(moe::prefill_ws_resident_records(g192.weight_format, 192, 7168, false) == 0);
    CHECK(smem(g192) == 205184u);
    CHECK(canon(g192) == g192);
    CHECK(name_expr(g192) ==
          "&kiln_dev::moe::moe_w4a16_prefill_wgmma_ws<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 192, 7, 0, 1>");
    const KernelDescriptor g128 = pg(gu, true, 128);
    CHECK(pc(g128).stages == 11);  // 16 KB + 4,608 B per slot
    CHECK(smem(g128) == 231680u);
    // down (rows): the same kernel with the m-block's token tile resident (K 256: 4 records of 24 KB) and two
    // staging tiles for the transposing epilogue (192 rows x 128 bytes each): 18 slots.
    const KernelDescriptor d192 = pg(dn, false, 192);
    CHECK(MoeW4A16PrefillFamily::warp_specialised(d192));
    CHECK(pc(d192).block_m == 192);
    CHECK(pc(d192).block_n == 1792);
    CHECK(pc(d192).ctas_per_sm == 1);
    CHECK(pc(d192).warps == 12);
    CHECK(moe::prefill_ws_resident_records(d192.weight_format, 192, 256, true) == 4);
    CHECK(pc(d192).stages == 18);
    CHECK(smem(d192) == 230784u);
    CHECK(canon(d192) == d192);
    CHECK(name_expr(d192) ==
          "&kiln_dev::moe::moe_w4a16_prefill_wgmma_ws<kiln_dev::moe::kFormatInt4, false, 2, 0, false, 192, 18, 4, 14>");
    const KernelDescriptor d64 = pg(dn, false, 64);
    CHECK(!MoeW4A16PrefillFamily::warp_specialised(d64));
    CHECK(name_expr(d64).find("moe_w4a16_prefill_wgmma<") != std::string::npos);
    const KernelDescriptor d3 = pg(dn3, false, 128);  // K3 TP8 down: K 384, 6 resident records of 16 KB
    CHECK(MoeW4A16PrefillFamily::warp_specialised(d3));
    CHECK(moe::prefill_ws_resident_records(d3.weight_format, 128, 384, true) == 6);
    CHECK(name_expr(d3).find("false, 2, 0, false, 128, ") != std::string::npos);
    CHECK(moe::prefill_ws_superblocks_per_cta(3584, 384) == 14);
    CHECK(moe::prefill_ws_superblocks_per_cta(7168, 256) == 14);
    CHECK(moe::prefill_ws_superblocks_per_cta(7168, 576) == 2);  // 9 records: powers of two up to 32 records
    CHECK(moe::prefill_ws_superblocks_per_cta(2304, 256) == 9);  // 18 super-blocks: 2 CTAs of 9
    CHECK(moe::prefill_ws_superblocks_per_cta(256, 256) == 2);
    CHECK(moe::prefill_ws_superblocks_per_cta(4096, 7168) == 1);
    const KernelDescriptor o128 = pg(odd, true, 128);  // K 352: masked, 6 resident records
    CHECK(pc(o128).mask_k == 1);
    CHECK(moe::prefill_ws_resident_records(o128.weight_format, 128, 352, false) == 6);

    // Refused: block_m 128 / 192 without wgmma, on other targets, with the wide CTA, other block_m, too many slots.
    CHECK_THROWS_AS(prefill(Matrix::gate_up, gu, silu, MoeMma::sync, false, 192), kiln::InvalidArgument);
    CHECK_THROWS_AS(prefill(Matrix::gate_up, gu, silu, MoeMma::wgmma, false, 192, Target::sm(90)),
                    kiln::InvalidArgument);
    CHECK_THROWS_AS(prefill(Matrix::gate_up, gu, silu, MoeMma::wgmma, true, 128), kiln::InvalidArgument);
    CHECK_THROWS_AS(pg(gu, true, 96), kiln::InvalidArgument);
    CHECK_THROWS_AS(prefill(Matrix::gate_up, gu, silu, MoeMma::sync, false, 128, k_host), kiln::InvalidArgument);
    KernelDescriptor big = g192;
    PrefillC c = pc(g192);
    c.stages = 8;
    big.config = KernelConfig::of(c);
    CHECK_THROWS_AS(canon(big), kiln::InvalidArgument);
    c.stages = 2;
    big.config = KernelConfig::of(c);
    CHECK(pc(canon(big)).stages == 2);

    for (const KernelDescriptor& k : {g192, g128, o128, d192, d3}) {
        CAPTURE(to_string(k));
        const bool ws = MoeW4A16PrefillFamily::warp_specialised(k);
        const NvrtcOutput out = compile(k, ws ? prefill_ws_smem_checks(k) : prefill_wgmma_smem_checks(k), true);
        check_cubin(out, ws ? "moe_w4a16_prefill_wgmma_ws" : "moe_w4a16_prefill_wgmma");
        check_wgmma_report(out);
    }
}

TEST_CASE("moe_w4a16: bad prefill descriptors are refused; the host target maps them to its GEMMs") {
    const MatrixShape gu = gate_up(k_int4, 256, 512), dn = down(k_int4, 512, 256);
    const KernelDescriptor g = prefill(Matrix::gate_up, gu, situ);
    const auto with = [&](auto&& change) {
        KernelDescriptor d = g;
        PrefillC c = pc(g);
        change(c);
        d.config = KernelConfig::of(c);
        return d;
    };
    CHECK_THROWS_AS(canon(with([](PrefillC& c) { c.block_m = 32; })), kiln::InvalidArgument);
    CHECK_THROWS_AS(canon(with([](PrefillC& c) { c.stages = 20; })), kiln::InvalidArgument);  // over 112 KB
    // seven two-record INT4 slots: 116,864 B
    CHECK_THROWS_AS(canon(with([](PrefillC& c) { c.stages = 7; })), kiln::InvalidArgument);
    CHECK(canon(with([](PrefillC& c) { c.stages = 6; })) == g);
    CHECK_THROWS_AS(canon(with([](PrefillC& c) { c.matrix = 2; })), kiln::InvalidArgument);  // neither gate_up nor down
    CHECK_THROWS_AS(canon(with([](PrefillC& c) { c.mma = 2; })), kiln::InvalidArgument);
    CHECK_THROWS_AS(canon(with([](PrefillC& c) { c.wide = 1; })), kiln::InvalidArgument);  // mma.sync has no wide CTA
    KernelDescriptor no_weights = g;
    no_weights.weight_format = WeightFormat::none;
    CHECK_THROWS_AS(canon(no_weights), kiln::InvalidArgument);

    const KernelDescriptor hg = prefill(Matrix::gate_up, gu, situ, MoeMma::wgmma, true, 64, k_host);
    CHECK(hg.target.is_host());
    CHECK(pc(hg).block_m == 64);
    CHECK(pc(hg).act == static_cast<uint8_t>(situ));
    CHECK(pc(hg).mma == 0);  // the device-only fields are zero
    CHECK(pc(hg).wide == 0);
    CHECK(pc(hg).stages == 0);
    CHECK(canon(hg) == hg);
    const KernelDescriptor hd = prefill(Matrix::down, dn, situ, MoeMma::sync, false, 64, k_host);
    // the prefill GEMMs on the host are the decode family's host GEMM with m-blocks of 64 rows (down: rows)
    const MoeW4A16PrefillFamily pf;
    CHECK(pf.host_source(hd).source.find("gemm<kiln_host::moe::kFormatInt4, 2, 0, 64, 512, 256>") != std::string::npos);
    CHECK(pf.host_source(hg).source.find("gemm<kiln_host::moe::kFormatInt4, 0, 1, 64, 512, 512>") != std::string::npos);
    const KernelDescriptor rows = decode(Matrix::down, dn, situ, 32, false, true, 0, 0, k_host);
    CHECK(MoeW4A16DecodeFamily().host_source(rows).source.find(
              "gemm<kiln_host::moe::kFormatInt4, 2, 0, 32, 512, 256>") != std::string::npos);
    CHECK(route(8, 64, k_host).config.as<MoeW4A16RouteConfig>().block_m == 64);
    CHECK(MoeW4A16RouteFamily().host_source(route(8, 64, k_host)).source.find("routing<8, 64>") != std::string::npos);
}

TEST_CASE("moe_w4a16: NVRTC compiles the prefill GEMMs to sm_90a (both formats, activations, masks)") {
    const MatrixShape gu4 = gate_up(k_int4, 2048, 7168), dn4 = down(k_int4, 7168, 2048),
                      odd4 = gate_up(k_int4, 96, 224);
    const MatrixShape k160 = gate_up(k_int4, 96, 160);  // block_k 64
    const MatrixShape dn192 = down(k_mxfp4, 256, 192);
    const MatrixShape gu_fp4 = gate_up(k_mxfp4, 3072, 3584), dn_fp4 = down(k_mxfp4, 3584, 3072, true);
    const KernelDescriptor kernels[] = {
        prefill(Matrix::gate_up, gu4, silu),     prefill(Matrix::gate_up, odd4, situ),
        prefill(Matrix::down, dn4, silu),        prefill(Matrix::gate_up, gu_fp4, situ),
        prefill(Matrix::gate_up, gu_fp4, silu),  prefill(Matrix::down, dn_fp4, situ),
        prefill(Matrix::gate_up, k160, silu),    prefill(Matrix::down, dn192, silu),
    };
    int recs_seen[3] = {0, 0, 0};
    for (const KernelDescriptor& d : kernels) {
        CAPTURE(to_string(d));
        check_cubin(compile(d, prefill_smem_checks(d)), "moe_w4a16_prefill");
        ++recs_seen[pc(d).block_k / 64];
    }
    CHECK(recs_seen[1] == 2);  // one record per K step (K 160, K 192)
    CHECK(recs_seen[2] == 6);
    check_cubin(compile(route(48, 64)), "moe_w4a16_routing");
}
