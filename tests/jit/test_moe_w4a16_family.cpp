// Family moe_w4a16 (CPU): descriptors canonicalise and refuse what the kernels cannot do, the layout is
// checked at dispatch, and NVRTC compiles every kernel kind to an sm_90a cubin without a GPU. The
// family's shared-memory sizes and default stages are checked against the templates' own constexpr
// functions by static assertions compiled into those NVRTC programs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "jit/family_moe_w4a16.hpp"
#include "jit/kernel_key.hpp"
#include "jit/moe_w4a16_schedule.hpp"
#include "jit/nvrtc.hpp"
#include "runtime/error.hpp"

using namespace kiln::jit;

namespace {

const Target k_h200 = Target::sm(90, 'a');

moe::PreparedMoeWeights meta(moe::W4Format f, moe::W4Layout l, bool gate_up, int n, int k, int experts = 4) {
    const bool int4 = f == moe::W4Format::int4_g32_bf16;
    std::vector<std::byte> packed(int4 ? size_t(n) * (k / 8) * 4 : size_t(n) * (k / 2));
    std::vector<std::byte> scale(size_t(n) * (k / 32) * (int4 ? 2 : 1), static_cast<std::byte>(int4 ? 0 : 127));
    moe::PreparedMoeWeights w = moe::prepare_moe_weights(f, l, gate_up, 1, n, k, [&](int, int) {
        return moe::CheckpointMatrix{packed, scale};
    });
    w.bytes.clear();
    w.experts = experts;
    return w;
}

// `checks`: device code appended to the translation unit (static assertions on the templates).
// `ptxas_report`: ptxas's resource report and performance advisories in the log.
NvrtcOutput compile(const KernelDescriptor& d, const std::string& checks = {}, bool ptxas_report = false) {
    const Family& f = builtin_families().get(d.family.view());
    KernelRecipe r = make_recipe(f, f.canonicalize(d), TemplateStore::instance());
    NvrtcProgram p = nvrtc_program(r, locate_cuda_headers());
    p.source += checks;
    if (ptxas_report) p.options.push_back("--ptxas-options=--verbose");
    return Nvrtc::instance().compile(p);
}

const char* dev_format(WeightFormat f) {
    return f == WeightFormat::int4_g32_bf16 ? "kiln_dev::moe::kFormatInt4" : "kiln_dev::moe::kFormatMxfp4";
}

// The template's shared memory and default stages for a prefill descriptor must equal the family's.
std::string prefill_smem_checks(const KernelDescriptor& d) {
    const int recs = d.config.block_k / 64;
    const std::string args = std::string(dev_format(d.weight_format)) + ", 8, " + std::to_string(recs);
    return "\nstatic_assert(kiln_dev::moe::prefill_smem_bytes<" + args + ">(" + std::to_string(d.config.stages) +
           ") == " + std::to_string(MoeW4A16Family().max_dynamic_smem(d)) + ", \"family prefill smem\");\n" +
           "static_assert(kiln_dev::moe::prefill_default_stages<" + args + ">() == " +
           std::to_string(moe_w4a16_prefill_default_stages(d.weight_format, recs)) + ", \"family prefill stages\");\n";
}

// The same for a warpgroup-MMA prefill descriptor.
std::string prefill_wgmma_smem_checks(const KernelDescriptor& d) {
    const int recs = d.config.block_k / 64, par = (d.config.flags & MoeW4A16Family::k_flag_wide) ? 2 : 1;
    const std::string args =
        std::string(dev_format(d.weight_format)) + ", " + std::to_string(recs) + ", " + std::to_string(par);
    return "\nstatic_assert(kiln_dev::moe::prefill_wgmma_smem_bytes<" + args + ">(" + std::to_string(d.config.stages) +
           ") == " + std::to_string(MoeW4A16Family().max_dynamic_smem(d)) + ", \"family wgmma prefill smem\");\n" +
           "static_assert(kiln_dev::moe::prefill_wgmma_default_stages<" + args + ">() == " +
           std::to_string(moe_w4a16_prefill_wgmma_default_stages(d.weight_format, recs, par)) +
           ", \"family wgmma prefill stages\");\n";
}

// The same for a decode GEMM descriptor.
std::string decode_smem_checks(const KernelDescriptor& d) {
    const std::string f = dev_format(d.weight_format);
    const int tiles = d.config.block_m / 8, recs = d.config.block_k / 64;
    const std::string args = f + ", " + std::to_string(tiles) + ", " + std::to_string(recs);
    const bool fused = (d.config.flags & MoeW4A16Family::k_flag_fused) != 0;
    const std::string ring = "kiln_dev::moe::decode_smem_bytes<" + args + ">(" + std::to_string(d.config.stages) + ")";
    std::string s = "\nstatic_assert(" + ring + " == " +
                    std::to_string(fused ? moe_w4a16_gemm_smem(d.weight_format, tiles, d.config.stages, recs)
                                         : MoeW4A16Family().max_dynamic_smem(d)) +
                    ", \"family decode smem\");\n" + "static_assert(kiln_dev::moe::decode_default_stages<" + args +
                    ">() == " + std::to_string(moe_w4a16_default_stages(d.weight_format, tiles, recs)) +
                    ", \"family decode stages\");\n";
    if (fused) {
        // the fused kernel's routing area and scratch, as the host sizes a call (K2 EP8 decode 20, K3 B=128)
        const int slot_cases[][2] = {{1280, 48}, {2048, 112}, {40, 16}};
        for (const auto& sc : slot_cases) {
            const int slots = sc[0], experts = sc[1], bm = d.config.block_m;
            const int cap = slots / bm + std::min(experts, slots) + 1;
            const uint32_t host = MoeW4A16Family::fused_call_smem(d, slots, experts, cap, 8);
            REQUIRE(host > 0);
            s += "static_assert(" + ring + " + kiln_dev::moe::fused_route_area_bytes(" + std::to_string(cap) + ", " +
                 std::to_string(bm) + ") == " + std::to_string(host) + ", \"family fused call smem\");\n" +
                 "static_assert(kiln_dev::moe::fused_route_scratch_bytes(" + std::to_string(slots) + ", " +
                 std::to_string(experts) + ") <= " + ring + ", \"fused routing scratch\");\n";
            // the teams' claim slots and partial sums (k_groups 2 and 4) after the routing area
            for (const int kg : {2, 4}) {
                if (!MoeW4A16Family::fused_k_groups_ok(d, kg)) continue;
                const uint32_t with = MoeW4A16Family::fused_call_smem(d, slots, experts, cap, 8, kg);
                if (with == 0) continue;
                s += "static_assert(kiln_dev::moe::fused_team_area_bytes(" + std::to_string(kg) + ", " +
                     std::to_string(bm / 8) + ") == " + std::to_string(with - host) + ", \"family fused team area\");\n";
            }
        }
    }
    return s;
}

void check_cubin(const NvrtcOutput& out, const std::string& kernel) {
    REQUIRE(out.cubin.size() > 64);
    CHECK(std::memcmp(out.cubin.data(), "\x7f" "ELF", 4) == 0);
    CHECK(out.lowered_name.find(kernel) != std::string::npos);
}

}  // namespace

TEST_CASE("moe_w4a16: descriptors for the K2 and K3 layers") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 2048, 7168);
    const auto dn = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 7168, 2048);
    KernelDescriptor g = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200);
    CHECK(g.family.view() == "moe_w4a16");
    CHECK(g.mode.view() == "indexed");
    CHECK(g.n == 4096);
    CHECK(g.k == 7168);
    CHECK(g.weight_format == WeightFormat::int4_g32_bf16);
    CHECK(g.config.block_m == 8);
    CHECK(g.config.block_k == 256);  // four records per stage where K and a two-stage ring allow
    CHECK(g.config.stages == 2);
    KernelDescriptor g128 = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200,
                                                 MoeW4A16Schedule::static_shares, false, 128);
    CHECK(g128.config.block_k == 128);
    CHECK(g128.config.stages >= 4);  // the deepest ring that fits
    CHECK(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 4, k_h200).config.block_k == 128);
    CHECK(MoeW4A16Family::kind(g) == MoeW4A16Kernel::gate_up);
    CHECK(MoeW4A16Family().canonicalize(g) == g);  // idempotent
    CHECK(MoeW4A16Family().max_dynamic_smem(g) <= 232448u);
    DeviceSource s = MoeW4A16Family().device_source(g);
    CHECK(s.name_expr.find("moe_w4a16_decode<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 1,") != std::string::npos);
    CHECK(collect_template_headers(s.source, TemplateStore::instance()).size() == 3);

    KernelDescriptor d = MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, MoeActivation::silu_glu, 2, k_h200);
    CHECK(d.n == 7168);
    CHECK(d.k == 2048);
    CHECK(d.config.block_m == 16);
    CHECK(MoeW4A16Family().device_source(d).name_expr.find(", 1, 0, false, 2,") != std::string::npos);

    const auto k3 = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, true, 3072, 3584);
    KernelDescriptor k = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, k3, MoeActivation::situ_glu, 1, k_h200);
    CHECK(k.weight_format == WeightFormat::mxfp4_g32_e8m0);
    CHECK((k.config.flags & MoeW4A16Family::k_flag_situ) != 0);
    CHECK(MoeW4A16Family().device_source(k).name_expr.find("kFormatMxfp4, false, 0, 1, false, 1,") != std::string::npos);

    // the fused decode kernel: a dynamic gate_up descriptor with flag bit 9, device target only
    KernelDescriptor f = MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 1, k_h200);
    CHECK((f.config.flags & MoeW4A16Family::k_flag_fused) != 0);
    CHECK((f.config.flags & MoeW4A16Family::k_flag_dynamic) != 0);
    CHECK(MoeW4A16Family::kind(f) == MoeW4A16Kernel::gate_up);
    CHECK(MoeW4A16Family().canonicalize(f) == f);
    CHECK(f != MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200,
                                     MoeW4A16Schedule::dynamic));
    CHECK(MoeW4A16Family().device_source(f).name_expr.find("moe_w4a16_decode_fused<kiln_dev::moe::kFormatInt4, false, 0, false, 1,") !=
          std::string::npos);
    // four records per stage and a two-stage ring by default where K, down's K and shared memory allow
    CHECK(f.config.block_k == 256);
    CHECK(f.config.stages == 2);
    CHECK(MoeW4A16Family().device_source(f).name_expr.find(", 1, 2, 4>") != std::string::npos);
    KernelDescriptor f128 = MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 1, k_h200, 4, 128);
    CHECK(f128.config.block_k == 128);
    CHECK(f128.config.stages == 4);
    CHECK(MoeW4A16Family().canonicalize(f128) == f128);
    CHECK(MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 4, k_h200).config.block_k == 128);  // 32 rows: no room
    // a call's shared memory: the ring, then its routing (m-block descriptors, the slot of every sorted
    // row); refused (0) past 65,535 slots, top-k 32, or where the routing does not fit
    const uint32_t ring = moe_w4a16_gemm_smem(f.weight_format, 1, f.config.stages, f.config.block_k / 64);
    CHECK(MoeW4A16Family().max_dynamic_smem(f) == 232448u);
    CHECK(MoeW4A16Family::fused_call_smem(f, 1280, 48, 1280 / 8 + 48 + 1, 8) == ring + 5024 + 16);  // 209 x (8 + 8 x 2) bytes rounded up to 16, two flags
    CHECK(MoeW4A16Family::fused_call_smem(f, 65536, 48, 16, 8) == 0);
    CHECK(MoeW4A16Family::fused_call_smem(f, 1280, 48, 209, 33) == 0);
    CHECK(MoeW4A16Family::fused_call_smem(f, 1280, 48, 20000, 8) == 0);  // 20,000 m-blocks: no room
    // items shared by 2 or 4 warp groups: the claim slots (16 bytes) and 1 KB of partial sums per token
    // tile for each warp of groups 1..G-1
    CHECK(MoeW4A16Family::fused_call_smem(f, 1280, 48, 209, 8, 4) == ring + 5024 + 16 + 16 + 12 * 1024);
    CHECK(MoeW4A16Family::fused_call_smem(f, 1280, 48, 209, 8, 2) == ring + 5024 + 16 + 16 + 8 * 1024);
    CHECK(MoeW4A16Family::fused_k_groups_ok(f, 4));
    CHECK_FALSE(MoeW4A16Family::fused_k_groups_ok(f, 3));
    // m-blocks of 32 rows keep one group per item
    const KernelDescriptor f32 = MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 4, k_h200);
    CHECK(MoeW4A16Family::fused_k_groups_ok(f32, 1));
    CHECK_FALSE(MoeW4A16Family::fused_k_groups_ok(f32, 2));
    CHECK_THROWS_AS(MoeW4A16Family::fused_call_smem(f, 1280, 48, 209, 8, 3), kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::fused_call_smem(g, 1280, 48, 209, 8), kiln::InvalidArgument);  // not fused
    CHECK_THROWS_AS(MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 1, k_h200, 0, 192), kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 1, k_h200, 3, 256), kiln::InvalidArgument);
    CHECK(MoeW4A16Family::fusable(4096, 7168, 256));
    CHECK_FALSE(MoeW4A16Family::fusable(4096, 7168 - 128, 256));  // K 7040 is not whole 256-input stages
    CHECK_FALSE(MoeW4A16Family::fusable(2 * 384, 7168, 256));      // nor is down's K 384
    KernelDescriptor fs = g;  // static schedule
    fs.config.flags |= MoeW4A16Family::k_flag_fused;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(fs), kiln::InvalidArgument);
    KernelDescriptor fd = MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, MoeActivation::silu_glu, 1, k_h200,
                                               MoeW4A16Schedule::dynamic);
    fd.config.flags |= MoeW4A16Family::k_flag_fused;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(fd), kiln::InvalidArgument);
    KernelDescriptor fh = f;
    fh.target = Target::host_target();
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(fh), kiln::InvalidArgument);
    // down's K must be whole stages of gate_up's: intermediate 224 (K 224 -> 3.5 stages of 128)
    const auto odd_i = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 192, 256);
    CHECK_THROWS_AS(MoeW4A16Family::fused(odd_i, MoeActivation::silu_glu, 1, k_h200), kiln::InvalidArgument);

    KernelDescriptor r = MoeW4A16Family::routing(112, 1, k_h200);
    CHECK(r.experts == 112);
    CHECK(MoeW4A16Family().max_dynamic_smem(r) == 3 * 4 * 112);
    CHECK(moe_w4a16_routing_ctas(8) == 1);
    CHECK(moe_w4a16_routing_ctas(4095) == 1);
    CHECK(moe_w4a16_routing_ctas(16384) == 8);
    CHECK(moe_w4a16_routing_ctas(int64_t(1) << 20) == 32);
    CHECK(MoeW4A16Family().device_source(r).name_expr == "&kiln_dev::moe::moe_w4a16_routing<8>");
}

TEST_CASE("moe_w4a16: dynamic schedule, rows mode of down and the combine kernel") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 2048, 7168);
    const auto dn = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 7168, 2048);
    const KernelDescriptor st = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200);
    const KernelDescriptor g = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200,
                                                    MoeW4A16Schedule::dynamic);
    CHECK((g.config.flags & MoeW4A16Family::k_flag_dynamic) != 0);
    CHECK((st.config.flags & MoeW4A16Family::k_flag_dynamic) == 0);
    CHECK(!(g == st));  // a different kernel, a different cache key
    CHECK(MoeW4A16Family().canonicalize(g) == g);
    CHECK(MoeW4A16Family::kind(g) == MoeW4A16Kernel::gate_up);
    // the item slots cost shared memory: never more stages than the static kernel, and it still fits
    CHECK(g.config.stages <= st.config.stages);
    CHECK(MoeW4A16Family().max_dynamic_smem(g) <= 232448u);
    CHECK(MoeW4A16Family().max_dynamic_smem(g) > MoeW4A16Family().max_dynamic_smem(st) - 20000u);
    CHECK(MoeW4A16Family().device_source(g).name_expr.find(", 1>") != std::string::npos);
    CHECK(MoeW4A16Family().device_source(st).name_expr.find(", 0>") != std::string::npos);

    const KernelDescriptor r = MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, MoeActivation::silu_glu, 4, k_h200,
                                                    MoeW4A16Schedule::static_shares, true);
    CHECK((r.config.flags & MoeW4A16Family::k_flag_rows) != 0);
    CHECK(MoeW4A16Family::kind(r) == MoeW4A16Kernel::down);
    CHECK(MoeW4A16Family().device_source(r).name_expr.find("kFormatInt4, false, 2, 0, false, 4,") != std::string::npos);
    CHECK_THROWS_AS(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200,
                                         MoeW4A16Schedule::static_shares, true),
                    kiln::InvalidArgument);

    const KernelDescriptor c = MoeW4A16Family::combine(k_h200);
    CHECK(MoeW4A16Family::kind(c) == MoeW4A16Kernel::combine);
    CHECK(MoeW4A16Family().canonicalize(c) == c);
    CHECK(MoeW4A16Family().max_dynamic_smem(c) == 0);
    CHECK(MoeW4A16Family().device_source(c).name_expr == "&kiln_dev::moe::moe_w4a16_combine");
    KernelDescriptor bad = c;
    bad.config.flags |= 1u;  // kind bits 0-1 and bit 7 together name no kernel
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
}

TEST_CASE("moe_w4a16: schedule choices") {
    // automatic: the kernel decides from the real m-block count, aiming at items_per_group per group
    const auto gu = moe::decode_split(-1, 528, moe::k_gate_up_items_per_group);
    CHECK(gu.k_chunk == -moe::k_split_min_records);
    CHECK(gu.split_max_items == 2 * 528);
    const auto dn = moe::decode_split(-1, 528, moe::k_down_items_per_group);
    CHECK(dn.split_max_items == 8 * 528);
    // explicit chunks always apply; 0 is whole K
    CHECK(moe::decode_split(6, 528, 2).k_chunk == 6);
    CHECK(moe::decode_split(6, 528, 2).split_max_items > 1000000);
    CHECK(moe::decode_split(0, 528, 2).k_chunk == 0);
    CHECK(moe::split_scratch_items(1 << 30, 32) == (64 << 20) / (128 * 32 * 4));
    CHECK(moe::split_scratch_items(1056, 8) == 1056);
}

TEST_CASE("moe_w4a16: bad descriptors and prefill-packed weights are refused") {
    const auto pre = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::prefill_mma16, true, 256, 512);
    try {
        MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, pre, MoeActivation::silu_glu, 1, k_h200);
        FAIL("prefill-packed weights accepted by the decode kernel");
    } catch (const kiln::InvalidArgument& e) {
        CHECK(std::string(e.what()).find("prefill_mma16") != std::string::npos);
    }
    const auto down = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 512, 256);
    CHECK_THROWS_AS(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, down, MoeActivation::silu_glu, 1, k_h200),
                    kiln::InvalidArgument);  // plain matrices are not interleaved gate/up
    KernelDescriptor g = MoeW4A16Family::gemm(MoeW4A16Kernel::down, down, MoeActivation::silu_glu, 1, k_h200);
    KernelDescriptor bad = g;
    bad.config.block_m = 24;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad = g;
    bad.n = 200;  // not a whole number of 128-row super-blocks
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad = g;
    bad.k = 100;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad = g;
    bad.target = Target::sm(89);
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad = g;
    bad.target = Target::host_target();  // the host target has its own implementation
    const KernelDescriptor host = MoeW4A16Family().canonicalize(bad);
    CHECK(host.target.is_host());
    CHECK(host.config.stages == 0);  // host kernels have no pipeline stages
    CHECK(MoeW4A16Family().canonicalize(host) == host);
    bad = g;
    bad.config.stages = 20;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::routing(0, 1, k_h200), kiln::InvalidArgument);
}

TEST_CASE("moe_w4a16: odd K takes the masked variant, wide MXFP4 scales the exact path") {
    const auto odd = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 96, 224);
    KernelDescriptor g = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, odd, MoeActivation::silu_glu, 1, k_h200);
    CHECK((g.config.flags & MoeW4A16Family::k_flag_mask_k) != 0);
    CHECK(g.config.block_k == 256);  // K padded to 256
    auto wide = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 256, 192);
    wide.wide_scales = true;
    KernelDescriptor d = MoeW4A16Family::gemm(MoeW4A16Kernel::down, wide, MoeActivation::situ_glu, 1, k_h200);
    CHECK((d.config.flags & MoeW4A16Family::k_flag_wide_scale) != 0);
    CHECK((d.config.flags & MoeW4A16Family::k_flag_situ) == 0);  // the activation belongs to gate_up
    CHECK(d.config.block_k == 64);                                 // K_pad 192 is not a multiple of 128
    CHECK(MoeW4A16Family().device_source(d).name_expr.find("kFormatMxfp4, true, 1,") != std::string::npos);
}

TEST_CASE("moe_w4a16: NVRTC compiles every kernel kind to sm_90a") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 2048, 7168);
    const auto dn = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 3584, 3072);
    const auto odd = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 96, 224);
    const KernelDescriptor decode[] = {
        MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 1, k_h200),
        MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, MoeActivation::situ_glu, 2, k_h200),
        MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, odd, MoeActivation::situ_glu, 4, k_h200),
        MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 2, k_h200, MoeW4A16Schedule::dynamic),
        MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, MoeActivation::situ_glu, 4, k_h200, MoeW4A16Schedule::dynamic,
                             true),
        MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 1, k_h200),
        MoeW4A16Family::fused(gu, MoeActivation::silu_glu, 2, k_h200),
    };
    for (const KernelDescriptor& d : decode) {
        CAPTURE(to_string(d));
        check_cubin(compile(d, decode_smem_checks(d)), "moe_w4a16_decode");
    }
    check_cubin(compile(MoeW4A16Family::combine(k_h200)), "moe_w4a16_combine");
    check_cubin(compile(MoeW4A16Family::routing(384, 2, k_h200)), "moe_w4a16_routing");
    check_cubin(compile(MoeW4A16Family::dequant(dn, k_h200)), "moe_w4a16_dequant");
}

TEST_CASE("moe_w4a16: prefill GEMM descriptors (block_m 64, decode layout)") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 2048, 7168);
    const auto dn = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 3584, 3072);
    const KernelDescriptor g = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu, k_h200);
    CHECK(MoeW4A16Family::kind(g) == MoeW4A16Kernel::prefill_gate_up);
    CHECK((g.config.flags & MoeW4A16Family::k_flag_prefill) != 0);
    CHECK((g.config.flags & MoeW4A16Family::k_flag_kind_mask) == 0);
    CHECK(g.n == 4096);
    CHECK(g.k == 7168);
    CHECK(g.config.block_m == 64);
    CHECK(g.config.block_n == 128);
    CHECK(g.config.block_k == 128);  // K 7168 is a multiple of 128: two records per K step
    CHECK(g.config.warps == 8);
    CHECK(g.config.ctas_per_sm == 2);
    CHECK(g.config.stages == 6);  // the deepest INT4 ring of two-record slots under 112 KB (107,648 B)
    CHECK(MoeW4A16Family().max_dynamic_smem(g) == 107648u);
    CHECK(MoeW4A16Family().canonicalize(g) == g);
    const KernelDescriptor decode = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 4, k_h200);
    CHECK(!(g == decode));
    CHECK(MoeW4A16Family().device_source(g).name_expr ==
          "&kiln_dev::moe::moe_w4a16_prefill<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 8, 6, 1, 2>");
    CHECK(collect_template_headers(MoeW4A16Family().device_source(g).source, TemplateStore::instance()).size() == 4);

    const KernelDescriptor d = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn, MoeActivation::situ_glu, k_h200);
    CHECK(MoeW4A16Family::kind(d) == MoeW4A16Kernel::prefill_down);
    CHECK((d.config.flags & MoeW4A16Family::k_flag_rows) != 0);  // rows only
    CHECK((d.config.flags & MoeW4A16Family::k_flag_situ) == 0);  // the activation belongs to gate_up
    CHECK(d.config.block_k == 128);
    CHECK(d.config.stages == 7);
    CHECK(MoeW4A16Family().max_dynamic_smem(d) <= k_moe_w4a16_prefill_smem_limit);
    CHECK(MoeW4A16Family().max_dynamic_smem(d) == moe_w4a16_prefill_smem(WeightFormat::mxfp4_g32_e8m0, 7, 2));
    CHECK(MoeW4A16Family().max_dynamic_smem(d) == 113280u);
    CHECK(MoeW4A16Family().device_source(d).name_expr ==
          "&kiln_dev::moe::moe_w4a16_prefill<kiln_dev::moe::kFormatMxfp4, false, 2, 0, false, 8, 7, 1, 2>");

    // K padded to 64 not a multiple of 128: one record per K step, the deeper ring of one-record slots.
    const auto k320 = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 256, 320);
    const KernelDescriptor h = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, k320, MoeActivation::silu_glu, k_h200);
    CHECK(h.config.block_k == 64);
    CHECK(h.config.stages == 16);
    CHECK(MoeW4A16Family().max_dynamic_smem(h) == 110848u);
    CHECK((h.config.flags & MoeW4A16Family::k_flag_mask_k) == 0);
    CHECK(MoeW4A16Family().canonicalize(h) == h);
    CHECK(MoeW4A16Family().device_source(h).name_expr ==
          "&kiln_dev::moe::moe_w4a16_prefill<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 8, 16, 1, 1>");
    KernelDescriptor bk = h;  // block_k follows K, whatever the input says
    bk.config.block_k = 128;
    CHECK(MoeW4A16Family().canonicalize(bk) == h);
    KernelDescriptor rows_cleared = d;  // canonical form sets the rows flag whatever the input says
    rows_cleared.config.flags &= ~MoeW4A16Family::k_flag_rows;
    CHECK(MoeW4A16Family().canonicalize(rows_cleared) == d);

    const auto odd = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, true, 96, 224);
    auto wide = odd;
    wide.wide_scales = true;
    const KernelDescriptor o = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, wide, MoeActivation::situ_glu, k_h200);
    CHECK((o.config.flags & MoeW4A16Family::k_flag_mask_k) != 0);
    CHECK(o.config.block_k == 128);  // K 224 pads to 256; the second record of the last step is masked
    CHECK(MoeW4A16Family().device_source(o).name_expr.find("kFormatMxfp4, true, 0, 1, true, 8,") != std::string::npos);

    const KernelDescriptor r = MoeW4A16Family::routing(48, 8, k_h200);
    CHECK(r.config.block_m == 64);
    CHECK(MoeW4A16Family().device_source(r).name_expr == "&kiln_dev::moe::moe_w4a16_routing<64>");
    CHECK(MoeW4A16Family().canonicalize(r) == r);
}

TEST_CASE("moe_w4a16: warpgroup-MMA prefill descriptors (sm_90a only)") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 2048, 7168);
    const auto dn = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 3584, 3072);
    CHECK(MoeW4A16Family::has_wgmma(k_h200));
    CHECK(!MoeW4A16Family::has_wgmma(Target::sm(90)));
    CHECK(!MoeW4A16Family::has_wgmma(Target::sm(89)));
    CHECK(!MoeW4A16Family::has_wgmma(Target::host_target()));

    const KernelDescriptor g =
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu, k_h200, true);
    CHECK(MoeW4A16Family::kind(g) == MoeW4A16Kernel::prefill_gate_up);
    CHECK((g.config.flags & MoeW4A16Family::k_flag_wgmma) != 0);
    CHECK(g.config.block_m == 64);
    CHECK(g.config.block_k == 128);
    CHECK(g.config.ctas_per_sm == 2);
    // 4 token stages of 16 KB, then 9,216-byte weight slots: five fit under 112 KB (111,744 B)
    CHECK(g.config.stages == 5);
    CHECK(MoeW4A16Family().max_dynamic_smem(g) == 111744u);
    CHECK(MoeW4A16Family().canonicalize(g) == g);
    const KernelDescriptor mma = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu, k_h200);
    CHECK(!(g == mma));  // two kernels, two cache entries
    CHECK(MoeW4A16Family().device_source(g).name_expr ==
          "&kiln_dev::moe::moe_w4a16_prefill_wgmma<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 5, 2, 1, 1>");
    CHECK(g.config.block_n == 128);  // K 7168: one super-block per CTA
    CHECK(MoeW4A16Family().device_source(g).file_name == "moe_w4a16_prefill_wgmma_gate_up.cu");

    const KernelDescriptor d =
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn, MoeActivation::situ_glu, k_h200, true);
    CHECK((d.config.flags & MoeW4A16Family::k_flag_rows) != 0);
    CHECK(MoeW4A16Family().device_source(d).name_expr.find("moe_w4a16_prefill_wgmma<kiln_dev::moe::kFormatMxfp4, false, 2, 0") !=
          std::string::npos);
    CHECK(d.config.block_n == 128);  // K 3072: 24 steps of 128 inputs: one super-block
    // Short K (TP8-sliced down): several super-blocks per CTA, at most 16 K steps each, at most n / 128.
    CHECK(prefill_superblocks_per_cta(7168, 256) == 8);
    CHECK(prefill_superblocks_per_cta(7168, 384) == 4);
    CHECK(prefill_superblocks_per_cta(7168, 1024) == 2);
    CHECK(prefill_superblocks_per_cta(7168, 2048) == 1);
    CHECK(prefill_superblocks_per_cta(384, 256) == 3);
    CHECK(prefill_superblocks_per_cta(96, 256) == 1);  // fewer than 128 rows: still one super-block
    CHECK(prefill_ws_superblocks_per_cta(96, 256) == 1);
    const auto tp8_down = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 7168, 256);
    const KernelDescriptor t8 =
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, tp8_down, MoeActivation::silu_glu, k_h200, true);
    CHECK(t8.config.block_n == 1024);
    CHECK(MoeW4A16Family().canonicalize(t8) == t8);
    CHECK(MoeW4A16Family().device_source(t8).name_expr.find(", 2, 8, 1>") != std::string::npos);
    const KernelDescriptor t8_mma = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, tp8_down, MoeActivation::silu_glu, k_h200);
    CHECK(t8_mma.config.block_n == 128);  // the mma.sync version keeps a super-block per CTA
    // The wide CTA (two super-blocks side by side, one CTA per SM): only where a CTA walks one super-block.
    const KernelDescriptor gw =
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu, k_h200, true, true);
    CHECK((gw.config.flags & MoeW4A16Family::k_flag_wide) != 0);
    CHECK(gw.config.block_n == 256);
    CHECK(gw.config.warps == 16);
    CHECK(gw.config.ctas_per_sm == 1);
    CHECK(gw.config.stages == 9);  // 64 KB of token stages + 9 x 18,432-byte weight slots under 227 KB
    CHECK(MoeW4A16Family().max_dynamic_smem(gw) == 231552u);
    CHECK(MoeW4A16Family().canonicalize(gw) == gw);
    CHECK(MoeW4A16Family().device_source(gw).name_expr.find(", 9, 2, 1, 2>") != std::string::npos);
    const KernelDescriptor t8w =
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, tp8_down, MoeActivation::silu_glu, k_h200, true, true);
    CHECK(t8w == t8);  // short K walks super-blocks in sequence instead
    KernelDescriptor wide_mma = t8_mma;
    wide_mma.config.flags |= MoeW4A16Family::k_flag_wide;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(wide_mma), kiln::InvalidArgument);
    const auto k320 = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 256, 320);
    const KernelDescriptor h =
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, k320, MoeActivation::silu_glu, k_h200, true);
    CHECK(h.config.block_k == 64);  // one record per step: a single A buffer

    // Not on other targets; a stage count under three is refused; only the prefill kinds have the flag.
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu,
                                                 Target::sm(90), true),
                    kiln::InvalidArgument);
    KernelDescriptor two = g;
    two.config.stages = 2;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(two), kiln::InvalidArgument);
    KernelDescriptor decode_wgmma = MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 4, k_h200);
    decode_wgmma.config.flags |= MoeW4A16Family::k_flag_wgmma;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(decode_wgmma), kiln::InvalidArgument);
    // The host target runs the same computation with its own prefill GEMM: the flag does not split its cache.
    KernelDescriptor host_g = g;
    host_g.target = Target::host_target();
    KernelDescriptor host_mma = mma;
    host_mma.target = Target::host_target();
    CHECK(MoeW4A16Family().canonicalize(host_g) == MoeW4A16Family().canonicalize(host_mma));

    for (const KernelDescriptor& k : {g, d, h, t8, gw}) {
        CAPTURE(to_string(k));
        const NvrtcOutput out = compile(k, prefill_wgmma_smem_checks(k), true);
        check_cubin(out, "moe_w4a16_prefill_wgmma");
        // ptxas must keep the wgmmas asynchronous (a branch around them serialises every one: advisory
        // C7518) and spill nothing.
        CAPTURE(out.log);
        CHECK(out.log.find("Used ") != std::string::npos);
        CHECK(out.log.find("serialized") == std::string::npos);
        CHECK(out.log.find(" 0 bytes spill stores") != std::string::npos);
    }
}

// Compiled with the kernel: the family's shared-memory size equals the template's.
std::string prefill_ws_smem_checks(const KernelDescriptor& d) {
    const bool down = MoeW4A16Family::kind(d) == MoeW4A16Kernel::prefill_down;
    const int res = prefill_ws_resident_records(d.weight_format, d.config.block_m, d.k, down);
    return "\nstatic_assert(kiln_dev::moe::prefill_ws_smem_bytes<" + std::string(dev_format(d.weight_format)) + ", " +
           std::to_string(d.config.block_m) + ", " + std::to_string(res) + ", " + (down ? "2" : "0") + ">(" +
           std::to_string(d.config.stages) +
           ") == " + std::to_string(MoeW4A16Family().max_dynamic_smem(d)) + ", \"family ws prefill smem\");\n";
}

TEST_CASE("moe_w4a16: warp-specialised wgmma prefill descriptors (block_m 128 / 192)") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 256, 7168);  // K2 TP8
    const auto dn = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 7168, 256);
    const auto dn3 = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 3584, 384);  // K3 TP8
    const auto odd = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, true, 160, 352);
    const auto pg = [&](const moe::PreparedMoeWeights& w, bool gate_up, int bm) {
        return MoeW4A16Family::prefill_gemm(gate_up ? MoeW4A16Kernel::prefill_gate_up : MoeW4A16Kernel::prefill_down, w,
                                            MoeActivation::silu_glu, k_h200, true, false, bm);
    };
    // gate_up, K 7168: streaming, 24 KB token record + 4,608-byte weight record per slot: 7 slots, and
    // the m-block's router weights (192 floats).
    const KernelDescriptor g192 = pg(gu, true, 192);
    CHECK(g192.config.block_m == 192);
    CHECK(g192.config.stages == 7);
    CHECK(g192.config.warps == 12);
    CHECK(g192.config.ctas_per_sm == 1);
    CHECK(g192.config.block_n == 128);
    CHECK(prefill_ws_resident_records(g192.weight_format, 192, 7168) == 0);
    CHECK(MoeW4A16Family().max_dynamic_smem(g192) == 205184u);
    CHECK(MoeW4A16Family().canonicalize(g192) == g192);
    CHECK(MoeW4A16Family().device_source(g192).name_expr ==
          "&kiln_dev::moe::moe_w4a16_prefill_wgmma_ws<kiln_dev::moe::kFormatInt4, false, 0, 0, false, 192, 7, 0, 1>");
    const KernelDescriptor g128 = pg(gu, true, 128);
    CHECK(g128.config.stages == 11);  // 16 KB + 4,608 B per slot
    CHECK(MoeW4A16Family().max_dynamic_smem(g128) == 231680u);
    // down (rows): the same kernel with the m-block's token tile resident (K 256: 4 records of 24 KB) and two
    // staging tiles for the transposing epilogue (192 rows x 128 bytes each): 18 slots.
    const KernelDescriptor d192 = pg(dn, false, 192);
    CHECK(MoeW4A16Family::prefill_ws(d192));
    CHECK(MoeW4A16Family::prefill_ws(g192));
    CHECK(d192.config.block_m == 192);
    CHECK(d192.config.block_n == 1792);
    CHECK(d192.config.ctas_per_sm == 1);
    CHECK(d192.config.warps == 12);
    CHECK((d192.config.flags & MoeW4A16Family::k_flag_rows) != 0);
    CHECK(prefill_ws_resident_records(d192.weight_format, 192, 256, true) == 4);
    CHECK(d192.config.stages == 18);
    CHECK(MoeW4A16Family().max_dynamic_smem(d192) == 230784u);
    CHECK(MoeW4A16Family().canonicalize(d192) == d192);
    CHECK(MoeW4A16Family().device_source(d192).name_expr ==
          "&kiln_dev::moe::moe_w4a16_prefill_wgmma_ws<kiln_dev::moe::kFormatInt4, false, 2, 0, false, 192, 18, 4, 14>");
    const KernelDescriptor d64 = pg(dn, false, 64);
    CHECK(!MoeW4A16Family::prefill_ws(d64));
    CHECK(MoeW4A16Family().device_source(d64).name_expr.find("moe_w4a16_prefill_wgmma<") != std::string::npos);
    const KernelDescriptor d3 = pg(dn3, false, 128);  // K3 TP8 down: K 384, 6 resident records of 16 KB
    CHECK(MoeW4A16Family::prefill_ws(d3));
    CHECK(prefill_ws_resident_records(d3.weight_format, 128, 384, true) == 6);
    CHECK(MoeW4A16Family().device_source(d3).name_expr.find("false, 2, 0, false, 128, ") != std::string::npos);
    CHECK(prefill_ws_superblocks_per_cta(3584, 384) == 14);
    CHECK(prefill_ws_superblocks_per_cta(7168, 256) == 14);
    CHECK(prefill_ws_superblocks_per_cta(7168, 576) == 2);  // 9 records: powers of two up to 32 records
    CHECK(prefill_ws_superblocks_per_cta(2304, 256) == 9);  // 18 super-blocks: 2 CTAs of 9
    CHECK(prefill_ws_superblocks_per_cta(256, 256) == 2);
    CHECK(prefill_ws_superblocks_per_cta(4096, 7168) == 1);
    const KernelDescriptor o128 = pg(odd, true, 128);  // K 352: masked, 6 resident records
    CHECK((o128.config.flags & MoeW4A16Family::k_flag_mask_k) != 0);
    CHECK(prefill_ws_resident_records(o128.weight_format, 128, 352) == 6);

    // Refused: block_m 128 / 192 without wgmma, on other targets, with the wide CTA, other block_m, too many slots.
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu, k_h200,
                                                 false, false, 192),
                    kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu,
                                                 Target::sm(90), true, false, 192),
                    kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::silu_glu, k_h200,
                                                 true, true, 128),
                    kiln::InvalidArgument);
    CHECK_THROWS_AS(pg(gu, true, 96), kiln::InvalidArgument);
    KernelDescriptor big = g192;
    big.config.stages = 8;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(big), kiln::InvalidArgument);
    big.config.stages = 2;
    CHECK(MoeW4A16Family().canonicalize(big).config.stages == 2);
    // Routing in m-blocks of 128 / 192 (device target).
    CHECK(MoeW4A16Family::routing(384, 24, k_h200).config.block_m == 192);
    CHECK(MoeW4A16Family::routing(384, 16, k_h200).config.block_m == 128);
    CHECK_THROWS_AS(MoeW4A16Family::routing(384, 12, k_h200), kiln::InvalidArgument);

    for (const KernelDescriptor& k : {g192, g128, o128, d192, d3}) {
        CAPTURE(to_string(k));
        const bool ws = MoeW4A16Family::prefill_ws(k);
        const NvrtcOutput out = compile(k, ws ? prefill_ws_smem_checks(k) : prefill_wgmma_smem_checks(k), true);
        check_cubin(out, ws ? "moe_w4a16_prefill_wgmma_ws" : "moe_w4a16_prefill_wgmma");
        CAPTURE(out.log);
        CHECK(out.log.find("Used ") != std::string::npos);
        CHECK(out.log.find("serialized") == std::string::npos);
        CHECK(out.log.find(" 0 bytes spill stores") != std::string::npos);
    }
}

TEST_CASE("moe_w4a16: bad prefill descriptors are refused; the host target maps them to its GEMMs") {
    const auto gu = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 256, 512);
    const auto dn = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 512, 256);
    const KernelDescriptor g = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::situ_glu, k_h200);
    KernelDescriptor bad = g;
    bad.config.block_m = 32;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad = g;
    bad.config.stages = 20;  // over 112 KB: one CTA per SM
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad.config.stages = 7;  // seven two-record INT4 slots: 116,864 B
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad.config.stages = 6;
    CHECK(MoeW4A16Family().canonicalize(bad) == g);
    bad = g;
    bad.config.flags = MoeW4A16Family::k_flag_prefill | static_cast<uint32_t>(MoeW4A16Kernel::routing);
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    bad.config.flags = MoeW4A16Family::k_flag_prefill | MoeW4A16Family::k_flag_kind_hi;
    CHECK_THROWS_AS(MoeW4A16Family().canonicalize(bad), kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, dn, MoeActivation::silu_glu, k_h200),
                    kiln::InvalidArgument);  // plain matrices are not interleaved gate/up
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, k_h200),
                    kiln::InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::silu_glu, 8, k_h200),
                    kiln::InvalidArgument);  // block_m 64 is the prefill GEMM's, not the decode kernel's
    const auto pre = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::prefill_mma16, true, 256, 512);
    CHECK_THROWS_AS(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, pre, MoeActivation::silu_glu, k_h200),
                    kiln::InvalidArgument);  // reads the decode layout

    const Target host = Target::host_target();
    const KernelDescriptor hg = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, MoeActivation::situ_glu, host);
    CHECK(hg == MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, MoeActivation::situ_glu, 8, host));
    CHECK(MoeW4A16Family::kind(hg) == MoeW4A16Kernel::gate_up);
    CHECK(hg.config.block_m == 64);
    CHECK(MoeW4A16Family().canonicalize(hg) == hg);
    const KernelDescriptor hd = MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn, MoeActivation::situ_glu, host);
    CHECK(hd == MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, MoeActivation::situ_glu, 8, host,
                                     MoeW4A16Schedule::static_shares, true));
    CHECK(MoeW4A16Family().host_source(hd).source.find("gemm<kiln_host::moe::kFormatInt4, 2, 0, 64, 512, 256>") !=
          std::string::npos);
    CHECK(MoeW4A16Family().host_source(hg).source.find("gemm<kiln_host::moe::kFormatInt4, 0, 1, 64, 512, 512>") !=
          std::string::npos);
    CHECK(MoeW4A16Family::routing(8, 8, host).config.block_m == 64);
}

TEST_CASE("moe_w4a16: NVRTC compiles the prefill GEMMs to sm_90a (both formats, activations, masks)") {
    const auto gu4 = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 2048, 7168);
    const auto dn4 = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, false, 7168, 2048);
    const auto odd4 = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 96, 224);
    const auto k160 = meta(moe::W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16, true, 96, 160);  // block_k 64
    const auto dn192 = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 256, 192);
    const auto gu_fp4 = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, true, 3072, 3584);
    auto dn_fp4 = meta(moe::W4Format::mxfp4_g32_e8m0, moe::W4Layout::decode_mma16, false, 3584, 3072);
    dn_fp4.wide_scales = true;
    const KernelDescriptor kernels[] = {
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu4, MoeActivation::silu_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, odd4, MoeActivation::situ_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn4, MoeActivation::silu_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu_fp4, MoeActivation::situ_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu_fp4, MoeActivation::silu_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn_fp4, MoeActivation::situ_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, k160, MoeActivation::silu_glu, k_h200),
        MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn192, MoeActivation::silu_glu, k_h200),
    };
    int recs_seen[3] = {0, 0, 0};
    for (const KernelDescriptor& d : kernels) {
        CAPTURE(to_string(d));
        check_cubin(compile(d, prefill_smem_checks(d)), "moe_w4a16_prefill");
        ++recs_seen[d.config.block_k / 64];
    }
    CHECK(recs_seen[1] == 2);  // one record per K step (K 160, K 192)
    CHECK(recs_seen[2] == 6);
    check_cubin(compile(MoeW4A16Family::routing(48, 8, k_h200)), "moe_w4a16_routing");
}
