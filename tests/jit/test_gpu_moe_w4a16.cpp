// moe_w4a16 on the device (suite gpu): the fused dequantisation is bit-identical to the unfused bf16
// form, and the whole layer (routing prep, gate_up + GLU, down + combine) matches the CPU
// reference (model/reference routed_experts on the checkpoint weights dequantised exactly) within bf16
// tolerance, for both formats and activations, skewed routings, empty experts, a hot expert, tokens with
// no local expert, odd sizes and 1 to 16k tokens. Outputs are poisoned (NaN) before every run, and
// every case runs twice (the layer must leave its accumulator and counters clean) under each layer
// configuration: the automatic choices, static and dynamic schedules (chosen K chunks, one-stage items
// with an odd claim window), fp32-atomic and rows + combine down paths, and the prefill configuration
// (routing into m-blocks of 64, the prefill GEMMs, rows + combine; forced for every case, also with a
// workspace larger than the call), whose K steps are 128 wide where K padded to 64 is a multiple of 128
// and 64 wide otherwise (cases with K 160, 192, 320).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "cache/store.hpp"
#include "jit/dispatcher.hpp"
#include "jit/moe_w4a16.hpp"
#include "tests/jit/moe_w4a16_test_data.hpp"
#include "runtime/bf16.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/cuda/stream.hpp"

using namespace kiln::jit;
using namespace kiln::runtime;
using moe::W4Format;
using moe_test::make_routing;
using moe_test::random_matrix;
using moe_test::Routing;
namespace fs = std::filesystem;

namespace {

struct Fixture {
    fs::path dir;
    std::unique_ptr<kiln::cache::Store> store;
    std::unique_ptr<Context> ctx;
    std::unique_ptr<Dispatcher> disp;
    Fixture() {
        std::string tmpl = (fs::temp_directory_path() / "kiln-gpu-moe-XXXXXX").string();
        REQUIRE(mkdtemp(tmpl.data()) != nullptr);
        dir = tmpl;
        kiln::cache::StoreOptions so;
        so.cache_dir = dir.string();
        store = std::make_unique<kiln::cache::Store>(so);
        ctx = std::make_unique<Context>(0);
        ctx->make_current();
        DispatcherOptions o;
        o.store = store.get();
        disp = std::make_unique<Dispatcher>(o);
    }
    ~Fixture() {
        disp.reset();
        store.reset();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

Fixture& fixture() {
    static Fixture f;
    f.ctx->make_current();
    return f;
}

template <typename F>
void parallel_for(int n, F&& f) {
    std::atomic<int> next{0};
    const int nt = std::max(1, std::min<int>(n, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (int i = 0; i < nt; ++i)
        th.emplace_back([&]() {
            for (int j = next.fetch_add(1); j < n; j = next.fetch_add(1)) f(j);
        });
    for (auto& t : th) t.join();
}

struct Case {
    const char* name;
    W4Format fmt;
    MoeActivation act;
    int hidden, inter, experts, topk, tokens;
    const char* routing;
    int tiles;
};

void run_case(const Case& c) {
    CAPTURE(c.name);
    Fixture& fx = fixture();
    const uint64_t seed = std::hash<std::string>{}(c.name) & 0xFFFFFF;
    // Reference: the model's routed experts on the exactly dequantised weights.
    const moe_test::Problem pb =
        moe_test::make_problem(c.fmt, c.act, c.experts, c.hidden, c.inter, c.routing, c.tokens, c.topk, seed,
                               [](int n, const std::function<void(int)>& body) { parallel_for(n, body); });
    const moe::PreparedMoeWeights& wgu = pb.wgu;
    const moe::PreparedMoeWeights& wdn = pb.wdn;
    const Routing& r = pb.routing;
    const std::vector<uint16_t>& x = pb.x;
    const std::vector<double>& ref = pb.ref;

    DeviceMoeWeights dgu = DeviceMoeWeights::upload(wgu), ddn = DeviceMoeWeights::upload(wdn);
    DeviceBuffer dx = to_device(x), dids = to_device(r.ids), dw = to_device(r.weights);
    DeviceBuffer dout(size_t(c.tokens) * c.hidden * 2);
    const int64_t m = c.tokens;
    Stream s;
    using P = MoeW4A16SchedulePick;
    struct Config {
        const char* name;
        P gate_up, down;
        int gate_up_chunk, down_chunk, window;
        int64_t rows_min;
        int64_t prefill_min;  // -1: the decode kernels only
        int max_tokens_factor;  // workspace for this many times the call's tokens
        bool fuse = true;       // the fused decode kernel where the rows path meets the dynamic gate_up
        bool wgmma = true;      // prefill: the warpgroup-MMA GEMMs (sm_90a), else the mma.sync ones
        bool wide = false;      // wgmma prefill: two super-blocks side by side per CTA where K allows
        int block_m = 0;        // prefill rows per m-block (0: the layer's rule; 128 / 192 need wgmma)
        int decode_stages = 0;  // the fused decode kernel's ring (0: the defaults)
        int decode_block_k = 0;
        int k_groups = 1;       // the fused decode kernel's warp groups per item
        int64_t fused_min = MoeW4A16Options{}.fused_min;
    };
    const int64_t auto_prefill = MoeW4A16Options{}.prefill_min;
    const Config configs[] = {
        {"automatic (the defaults)", P::automatic, P::automatic, -1, -1, 1, 256, auto_prefill, 1},
        {"static, atomics", P::static_shares, P::static_shares, -1, -1, 1, -1, -1, 1},
        {"dynamic, whole K, unfused", P::dynamic, P::dynamic, 0, 0, 1, -1, -1, 1, false},
        {"dynamic, automatic chunks, unfused", P::dynamic, P::dynamic, -1, -1, 1, -1, -1, 1, false},
        {"dynamic, one-stage items, window 3, unfused", P::dynamic, P::dynamic, 1, 1, 3, -1, -1, 1, false},
        {"dynamic, fused", P::dynamic, P::dynamic, 0, -1, 1, -1, -1, 1},
        {"dynamic, fused, 64 inputs x 3 stages", P::dynamic, P::dynamic, 0, -1, 1, -1, -1, 1, true, true, false, 0, 3, 64},
        {"dynamic, fused, 128 inputs", P::dynamic, P::dynamic, 0, -1, 1, -1, -1, 1, true, true, false, 0, 0, 128},
        // items shared by warp groups, each streaming a part of K (fewer where K or shared memory do not allow)
        {"dynamic, fused from 1 slot, 4 groups per item, 64 inputs x 3 stages", P::dynamic, P::dynamic, 0, -1, 1, -1, -1,
         1, true, true, false, 0, 3, 64, 4, 1},
        {"dynamic, fused from 1 slot, 2 groups per item", P::dynamic, P::dynamic, 0, -1, 1, -1, -1, 1, true, true, false,
         0, 0, 0, 2, 1},
        // 256 inputs per stage for the unfused decode kernels too (where K allows; m-blocks of up to 16 rows)
        {"static, atomics, 256 inputs", P::static_shares, P::static_shares, -1, -1, 1, -1, -1, 1, true, true, false, 0, 0,
         256},
        {"dynamic, automatic chunks, unfused, 256 inputs", P::dynamic, P::dynamic, -1, -1, 1, -1, -1, 1, false, true, false,
         0, 0, 256},
        {"static, rows + combine, 256 inputs", P::static_shares, P::static_shares, -1, -1, 1, 0, -1, 1, true, true, false, 0,
         0, 256},
        {"static, rows + combine", P::static_shares, P::static_shares, -1, -1, 1, 0, -1, 1},
        {"dynamic, rows + combine, window 8 (fused)", P::dynamic, P::dynamic, -1, -1, 8, 0, -1, 1},
        {"dynamic, rows + combine, unfused", P::dynamic, P::dynamic, -1, -1, 1, 0, -1, 1, false},
        {"prefill (forced)", P::automatic, P::automatic, -1, -1, 1, 256, 0, 1},
        {"prefill (forced), workspace for 3 M", P::automatic, P::automatic, -1, -1, 1, -1, 0, 3},
        {"prefill (forced), mma.sync", P::automatic, P::automatic, -1, -1, 1, 256, 0, 1, true, false},
        {"prefill (forced), wide CTAs", P::automatic, P::automatic, -1, -1, 1, 256, 0, 1, true, true, true, 64},
        // (prefill-sized cases only; the automatic choice above takes 192 where a case has >= 117 rows per expert)
        {"prefill (forced), block_m 64", P::automatic, P::automatic, -1, -1, 1, 256, 0, 1, true, true, false, 64},
        {"prefill (forced), block_m 128, workspace for 2 M", P::automatic, P::automatic, -1, -1, 1, 256, 0, 2, true, true,
         false, 128},
    };
    const bool has_wgmma = MoeW4A16Family::has_wgmma(fx.disp->device_target());
    for (const Config& cfg : configs) {
        CAPTURE(cfg.name);
        if (cfg.block_m > 64 && !has_wgmma) continue;  // the large m-blocks are the wgmma kernel's
        if (cfg.block_m != 0 && !cfg.wide && c.tokens < 2048) continue;
        if (cfg.decode_block_k == 256 && c.tiles > 2) continue;  // two 256-input stages of 32 rows do not fit
        MoeW4A16Options opt;
        opt.act = c.act;
        opt.topk = c.topk;
        opt.max_tokens = c.tokens * cfg.max_tokens_factor;
        opt.tiles = c.tiles;
        opt.gate_up_schedule = cfg.gate_up;
        opt.down_schedule = cfg.down;
        opt.gate_up_k_chunk = cfg.gate_up_chunk;
        opt.down_k_chunk = cfg.down_chunk;
        opt.order_window = cfg.window;
        opt.rows_combine_min = cfg.rows_min;
        opt.prefill_min = cfg.prefill_min;
        opt.fuse = cfg.fuse;
        opt.prefill_wgmma = cfg.wgmma;
        opt.prefill_wide = cfg.wide;
        opt.prefill_block_m = cfg.block_m;
        opt.decode_stages = cfg.decode_stages;
        opt.decode_block_k = cfg.decode_block_k;
        opt.fused_k_groups = cfg.k_groups;
        if (cfg.k_groups > 1) opt.fused_k_groups_max_slots = int64_t(1) << 20;  // every fused call
        opt.fused_min = cfg.fused_min;
        MoeW4A16 layer(*fx.disp, dgu.meta, ddn.meta, opt);
        const bool want_prefill = cfg.prefill_min >= 0 && int64_t(c.tokens) * c.topk >= cfg.prefill_min * c.experts;
        std::vector<uint16_t> first;
        for (int rep = 0; rep < 2; ++rep) {
            CAPTURE(rep);
            fill_u8(dout.ptr(), 0xFF, dout.size());  // NaN
            layer.forward(dgu.ptr(), ddn.ptr(), dx.view(DType::bf16, {m, c.hidden}), dids.view(DType::i32, {m, c.topk}),
                          dw.view(DType::f32, {m, c.topk}), dout.view(DType::bf16, {m, c.hidden}), s.handle());
            s.synchronize();
            CHECK(layer.uses_prefill() == want_prefill);
            if (!want_prefill) {
                // fused from 64 routed slots unless asked not to, a schedule is static, or down's K is not a
                // whole number of gate_up's stages
                const int bk = cfg.decode_block_k ? cfg.decode_block_k : wgu.k_pad % 128 == 0 ? 128 : 64;
                const bool fusable = wdn.k_pad % bk == 0 && wgu.k_pad % bk == 0;
                // (and up to the slots whose routing fits the fused kernel's shared memory)
                const int64_t slots = int64_t(c.tokens) * c.topk;
                CHECK(layer.uses_fused() == (cfg.fuse && fusable && slots >= opt.fused_min &&
                                             slots <= layer.fused_max_slots() && cfg.gate_up != P::static_shares &&
                                             cfg.down != P::static_shares));
                // every call of these small shapes up to 2,048 slots fits the fused kernel
                if (cfg.fuse && fusable && slots >= opt.fused_min && cfg.gate_up != P::static_shares &&
                    cfg.down != P::static_shares)
                    CHECK(layer.fused_max_slots() >= std::min<int64_t>(slots, 2048));
                if (layer.uses_fused()) {
                    CHECK(layer.uses_rows_path());
                    const int kg = layer.fused_k_groups_in_flight();
                    CHECK((kg >= 1 && kg <= cfg.k_groups));
                    // the whole K2 and K3 shapes have the stages and the room for four groups per item; the
                    // TP8 slices' down K (256, 384) has one or two stages, so fewer groups share an item
                    if (c.hidden >= 3584 && c.inter >= 2048 && cfg.k_groups == 4) CHECK(kg == 4);
                    // by default 256 inputs per stage where both K allow it and two stages of m-blocks of
                    // up to 16 rows fit
                    const bool wide = wdn.k_pad % 256 == 0 && wgu.k_pad % 256 == 0 && layer.tiles() <= 2;
                    CHECK(layer.gate_up_kernel().desc.config.block_k == (cfg.decode_block_k ? cfg.decode_block_k
                                                                         : wide               ? 256
                                                                                              : bk));
                }
            }
            if (want_prefill) {
                CHECK(layer.uses_rows_path());
                CHECK(MoeW4A16Family::kind(layer.gate_up_kernel().desc) == MoeW4A16Kernel::prefill_gate_up);
                CHECK(MoeW4A16Family::kind(layer.down_kernel().desc) == MoeW4A16Kernel::prefill_down);
                const bool wgmma = cfg.wgmma && has_wgmma;
                // the tok_e rule: rows per expert r = slots / experts; 64 below 80, else 128 or 192 (1.1 r)
                const double rows_e = double(c.tokens) * c.topk / c.experts;
                const int want_bm = cfg.block_m ? cfg.block_m
                                    : !wgmma || rows_e < 80 ? 64
                                    : 1.1 * rows_e <= 128 ? 128
                                                          : 192;
                CHECK(layer.prefill_block_m_in_flight() == want_bm);
                CHECK(layer.routing_kernel().desc.config.block_m == want_bm);
                CHECK(layer.gate_up_kernel().desc.config.block_m == want_bm);
                CHECK(layer.down_kernel().desc.config.block_m == want_bm);
                CHECK(((layer.gate_up_kernel().desc.config.flags & MoeW4A16Family::k_flag_wgmma) != 0) == wgmma);
                CHECK(((layer.down_kernel().desc.config.flags & MoeW4A16Family::k_flag_wgmma) != 0) == wgmma);
            }
            const std::vector<uint16_t> got = to_host<uint16_t>(dout);
            // the fused kernel sums each token's rows in slot order: the same bits on every call
            if (layer.uses_fused()) {
                if (rep == 0) first = got;
                else CHECK(got == first);
            }
            const moe_test::OutputError err = moe_test::output_error(got, ref);
            CHECK(err.nonfinite == 0);
            CHECK(err.rel <= 1e-2);
        }
    }
}

}  // namespace

TEST_CASE("moe_w4a16: fused dequantisation is bit-identical to the unfused bf16 form") {
    Fixture& fx = fixture();
    for (W4Format f : {W4Format::int4_g32_bf16, W4Format::mxfp4_g32_e8m0}) {
        for (bool gate_up : {false, true}) {
            const int n = gate_up ? 96 : 128, k = gate_up ? 224 : 256;
            std::vector<moe_test::CheckpointBytes> m;
            for (int p = 0; p < (gate_up ? 2 : 1); ++p) m.push_back(random_matrix(f, n, k, 100 + p, true));
            const moe::PreparedMoeWeights w = moe::prepare_moe_weights(
                f, moe::W4Layout::decode_mma16, gate_up, 1, n, k, [&](int, int p) { return m[p].view(); });
            CAPTURE(moe::to_string(f));
            CAPTURE(w.wide_scales);
            const LoadedKernel& kern = fx.disp->get(MoeW4A16Family::dequant(w, fx.disp->device_target()));
            DeviceMoeWeights dw = DeviceMoeWeights::upload(w);
            DeviceBuffer out(size_t(w.n_pad) * w.k_pad * 2);
            fill_u8(out.ptr(), 0xFF, out.size());
            Stream s;
            launch_moe_w4a16_dequant(kern, {dw.ptr(), out.ptr(), w.n_pad, w.k_pad}, s.handle());
            s.synchronize();
            const std::vector<uint16_t> got = to_host<uint16_t>(out);
            const long bad = moe_test::dequant_mismatches(w, n, k, got);
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("moe_w4a16: the layer matches the CPU reference") {
    using F = W4Format;
    const auto silu = MoeActivation::silu_glu, situ = MoeActivation::situ_glu;
    const Case cases[] = {
        {"int4 silu uniform", F::int4_g32_bf16, silu, 256, 128, 16, 4, 40, "uniform", 1},
        {"int4 silu, K and down's K of 256-input stages", F::int4_g32_bf16, silu, 512, 256, 16, 4, 40, "uniform", 1},
        {"mxfp4 situ tiles 2, K and down's K of 256-input stages", F::mxfp4_g32_e8m0, situ, 256, 512, 16, 8, 48,
         "skewed", 2},
        {"mxfp4 situ uniform", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 40, "uniform", 1},
        {"int4 situ tiles 2", F::int4_g32_bf16, situ, 256, 128, 16, 4, 40, "uniform", 2},
        {"mxfp4 silu tiles 4", F::mxfp4_g32_e8m0, silu, 256, 128, 16, 4, 40, "uniform", 4},
        {"one token", F::int4_g32_bf16, silu, 256, 128, 16, 4, 1, "uniform", 1},
        {"one token top-16", F::mxfp4_g32_e8m0, situ, 256, 192, 64, 16, 1, "uniform", 1},
        {"skewed", F::int4_g32_bf16, silu, 256, 128, 32, 8, 200, "skewed", 2},
        {"hot expert", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 150, "hot", 1},
        {"hot expert tiles 4", F::int4_g32_bf16, silu, 256, 128, 16, 4, 150, "hot", 4},
        {"half the experts empty", F::int4_g32_bf16, silu, 256, 128, 32, 4, 60, "half_empty", 1},
        {"foreign experts", F::int4_g32_bf16, silu, 256, 128, 8, 4, 64, "foreign", 1},
        {"no local expert", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 1},
        {"no local expert, fused-sized call", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 40, "none", 1},
        {"hidden 224 (masked K), foreign experts", F::int4_g32_bf16, silu, 224, 128, 16, 4, 40, "foreign", 1},
        {"odd sizes int4", F::int4_g32_bf16, silu, 224, 96, 5, 2, 33, "uniform", 1},
        {"odd sizes mxfp4", F::mxfp4_g32_e8m0, situ, 160, 160, 7, 3, 21, "uniform", 2},
        {"4096 tokens", F::int4_g32_bf16, silu, 256, 128, 64, 8, 4096, "uniform", 4},
        {"16384 tokens", F::mxfp4_g32_e8m0, situ, 128, 64, 32, 4, 16384, "uniform", 4},
        {"prefill odd K, 2048 tokens", F::int4_g32_bf16, silu, 352, 160, 12, 4, 2048, "skewed", 4},
        {"prefill 8192 tokens", F::mxfp4_g32_e8m0, situ, 256, 96, 24, 6, 8192, "uniform", 4},
        {"prefill hot expert 4096, odd sizes", F::int4_g32_bf16, silu, 224, 320, 16, 6, 4096, "hot", 4},
        {"prefill 4099 tokens top-3 (ids not a multiple of 4)", F::int4_g32_bf16, silu, 256, 128, 24, 3, 4099,
         "uniform", 4},
        {"prefill foreign slots 2048", F::int4_g32_bf16, situ, 256, 160, 48, 8, 2048, "foreign", 4},
        {"prefill half the experts empty 8192", F::int4_g32_bf16, situ, 160, 96, 32, 4, 8192, "half_empty", 4},
        {"prefill skewed 16384, K 352", F::mxfp4_g32_e8m0, silu, 352, 64, 64, 4, 16384, "skewed", 4},
        {"prefill mxfp4 silu 2048 odd", F::mxfp4_g32_e8m0, silu, 160, 224, 12, 4, 2048, "uniform", 4},
        // K a multiple of 64 but not of 128 for both GEMMs (unmasked): the prefill GEMMs take block_k 64.
        {"prefill K 320 / 192, block_k 64", F::int4_g32_bf16, situ, 320, 192, 16, 4, 2048, "skewed", 4},
        {"prefill short K, 9 super-blocks of down (a part CTA column)", F::int4_g32_bf16, silu, 1152, 128, 8, 2, 2048,
         "skewed", 4},
        {"prefill K 1152, 3 gate_up super-blocks (a half-empty wide CTA)", F::mxfp4_g32_e8m0, situ, 1152, 192, 8, 2,
         2048, "hot", 4},
        {"K2 shapes", F::int4_g32_bf16, silu, 7168, 2048, 16, 8, 6, "uniform", 1},
        {"K3 shapes", F::mxfp4_g32_e8m0, situ, 3584, 3072, 24, 16, 3, "uniform", 1},
        // TP8-sliced expert shapes (intermediate / 8): down's K is 256 (K2) or 384 (K3).
        {"K2 TP8 slice", F::int4_g32_bf16, silu, 7168, 256, 16, 8, 6, "uniform", 1},
        {"K3 TP8 slice", F::mxfp4_g32_e8m0, situ, 3584, 384, 24, 16, 3, "uniform", 1},
        {"prefill K2 TP8 slice, 512 tokens", F::int4_g32_bf16, silu, 7168, 256, 4, 2, 512, "skewed", 4},
        {"prefill K3 TP8 slice, 512 tokens", F::mxfp4_g32_e8m0, situ, 3584, 384, 4, 2, 512, "skewed", 4},
    };
    // KILN_TEST_MOE_CASES: only the cases whose name contains it (a quick check of one kernel family)
    const char* only = std::getenv("KILN_TEST_MOE_CASES");
    int ran = 0;
    for (const Case& c : cases) {
        if (only != nullptr && std::string(c.name).find(only) == std::string::npos) continue;
        run_case(c);
        ++ran;
    }
    CHECK_MESSAGE(ran > 0, "KILN_TEST_MOE_CASES names no case");
}
