// moe_w4a16 on the host target: the dequantiser is bit-identical to the unfused bf16 form, routing prep
// builds the m-block structure the GEMMs read, and the whole layer (routing, gate_up + GLU, down +
// combine) matches the CPU reference (model/reference routed_experts on the checkpoint weights
// dequantised exactly) within bf16 tolerance for both formats and activations, skewed routings, empty
// experts, a hot expert, tokens with no local expert, odd sizes and the K2 / K3 expert shapes (whole and
// TP8-sliced), in the decode configurations and in the prefill one (block_m 64 routing, the prefill
// gate_up and down-rows kinds, combine), and the combine alone with rows at their slot positions or in
// slot order. Outputs are poisoned (NaN) before every run; every layer case runs twice (the layer must
// leave its accumulator clean).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include "jit/family_moe_w4a16.hpp"
#include "jit/host_kernel_loader.hpp"
#include "jit/host_launch.hpp"
#include "jit/moe_w4a16_host.hpp"
#include "jit/moe_w4a16_weights.hpp"
#include "tests/jit/moe_w4a16_test_data.hpp"
#include "runtime/bf16.hpp"
#include "runtime/host/stream.hpp"

using namespace kiln;
using namespace kiln::jit;
using moe::W4Format;
using moe_test::make_routing;
using moe_test::random_matrix;
using moe_test::Routing;
using runtime::bf16_to_float;
using runtime::float_to_bf16;

namespace {

const Target k_host = Target::host_target();

template <typename T>
CUdeviceptr addr(T* p) {
    return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

struct Case {
    const char* name;
    W4Format fmt;
    MoeActivation act;
    int hidden, inter, experts, topk, tokens;
    const char* routing;
    int tiles;
};

void run_case(HostKernelLoader& loader, const Case& c, bool prefill = false) {
    CAPTURE(c.name);
    const uint64_t seed = std::hash<std::string>{}(c.name) & 0xFFFFFF;
    // Reference: the model's routed experts on the exactly dequantised weights.
    const moe_test::Problem pb = moe_test::make_problem(
        c.fmt, c.act, c.experts, c.hidden, c.inter, c.routing, c.tokens, c.topk, seed,
        [](int n, const std::function<void(int)>& body) {
            for (int e = 0; e < n; ++e) body(e);
        });
    const moe::PreparedMoeWeights& wgu = pb.wgu;
    const moe::PreparedMoeWeights& wdn = pb.wdn;
    const Routing& r = pb.routing;
    const std::vector<uint16_t>& x = pb.x;
    const std::vector<double>& ref = pb.ref;

    using Config = MoeW4A16HostConfig;
    const std::vector<Config> configs =
        prefill ? std::vector<Config>{Config::prefill} : std::vector<Config>{Config::decode_combined, Config::decode_rows};
    for (Config config : configs) {
    CAPTURE(static_cast<int>(config));
    MoeW4A16HostOptions opt;
    opt.act = c.act;
    opt.topk = c.topk;
    opt.max_tokens = c.tokens;
    opt.tiles = c.tiles;
    opt.force = config;
    MoeW4A16HostLayer layer(loader, wgu, wdn, opt);
    runtime::HostStream s;
    for (int rep = 0; rep < 2; ++rep) {
        CAPTURE(rep);
        std::vector<uint16_t> out(size_t(c.tokens) * c.hidden, 0xFFFF);  // NaN
        layer.forward(x.data(), r.ids.data(), r.weights.data(), c.tokens, out.data(), s);
        s.synchronize();
        CHECK(layer.last_config() == config);
        const moe_test::OutputError err = moe_test::output_error(out, ref);
        CHECK(err.nonfinite == 0);
        CHECK(err.rel <= 1e-2);
        if (err.den == 0) CHECK(err.num == 0);  // no local expert: exact zeros
        for (float a : layer.accumulator()) REQUIRE(a == 0.0f);  // left clean for the next call
    }
    }
}

}  // namespace

TEST_CASE("moe_w4a16 host dequantiser is bit-identical to the unfused bf16 form") {
    HostKernelLoader loader;
    runtime::HostStream s;
    for (W4Format f : {W4Format::int4_g32_bf16, W4Format::mxfp4_g32_e8m0}) {
        for (bool gate_up : {false, true}) {
            const int n = gate_up ? 96 : 128, k = gate_up ? 224 : 256;
            std::vector<moe_test::CheckpointBytes> m;
            for (int p = 0; p < (gate_up ? 2 : 1); ++p) m.push_back(random_matrix(f, n, k, 100 + p, true));
            const moe::PreparedMoeWeights w = moe::prepare_moe_weights(
                f, moe::W4Layout::decode_mma16, gate_up, 1, n, k, [&](int, int p) { return m[p].view(); });
            CAPTURE(moe::to_string(f));
            CAPTURE(gate_up);
            const LoadedKernel& kern = loader.get(MoeW4A16Family::dequant(w, k_host));
            std::vector<uint16_t> got(size_t(w.n_pad) * w.k_pad, 0xFFFF);
            launch_moe_w4a16_dequant(kern, {addr(w.bytes.data()), addr(got.data()), w.n_pad, w.k_pad}, s);
            s.synchronize();
            const long bad = moe_test::dequant_mismatches(w, n, k, got);
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("moe_w4a16 host routing prep builds the m-blocks the GEMMs read") {
    HostKernelLoader loader;
    runtime::HostStream s;
    for (int tiles : {1, 2, 4, 8}) {
        const int experts = 24, topk = 6, tokens = tiles == 8 ? 301 : 57, bm = 8 * tiles;
        CAPTURE(tiles);
        Routing r = make_routing("skewed", tokens, topk, experts, 9 + tiles);
        for (size_t i = 0; i < r.ids.size(); i += 5) r.ids[i] = (i / 5) % 2 ? -1 : experts + 3;  // other ranks
        const LoadedKernel& k = loader.get(MoeW4A16Family::routing(experts, tiles, k_host));
        for (int cap_cut : {0, 3}) {
            CAPTURE(cap_cut);
            std::map<int, std::vector<std::pair<int, float>>> want;  // expert -> (token, weight) in slot order
            for (int slot = 0; slot < tokens * topk; ++slot) {
                const int e = r.ids[slot];
                if (e >= 0 && e < experts) want[e].push_back({slot / topk, r.weights[slot]});
            }
            int blocks = 0;
            for (auto& [e, v] : want) blocks += (static_cast<int>(v.size()) + bm - 1) / bm;
            const int cap = blocks - cap_cut;
            std::vector<int32_t> counts(experts, -7), nmb(1, -7), info(size_t(blocks) * 2, -7),
                st(size_t(blocks) * bm, -7);
            std::vector<float> sw(size_t(blocks) * bm, -7.0f);
            MoeW4A16RoutingParams p{addr(r.ids.data()), addr(r.weights.data()), addr(counts.data()), addr(nmb.data()),
                                    addr(info.data()), addr(st.data()), addr(sw.data()), tokens, topk, experts, cap};
            launch_moe_w4a16_routing(k, p, s);
            s.synchronize();
            REQUIRE(nmb[0] == cap);
            int mb = 0;
            for (int e = 0; e < experts; ++e) {
                const auto& rows = want[e];
                CHECK(counts[e] == static_cast<int>(rows.size()));
                for (size_t j = 0; j < rows.size(); j += bm, ++mb) {
                    if (mb >= cap) continue;  // dropped past the capacity
                    CHECK(info[2 * mb] == e);
                    CHECK(info[2 * mb + 1] == static_cast<int>(std::min<size_t>(bm, rows.size() - j)));
                    for (int i = 0; i < bm; ++i) {
                        const size_t row = size_t(mb) * bm + i;
                        if (j + i < rows.size()) {
                            CHECK(st[row] == rows[j + i].first);
                            CHECK(sw[row] == rows[j + i].second);
                        } else {
                            CHECK(st[row] == -1);
                            CHECK(sw[row] == 0.0f);
                        }
                    }
                }
            }
            CHECK(mb == blocks);
            for (size_t i = size_t(cap) * 2; i < info.size(); ++i) CHECK(info[i] == -7);  // past the cap: untouched
        }
    }
}

TEST_CASE("moe_w4a16 host combine sums each token's local rows, at their slot positions, plain or tiled") {
    HostKernelLoader loader;
    runtime::HostStream s;
    const LoadedKernel& k = loader.get(MoeW4A16Family::combine(k_host));
    const int tokens = 37, topk = 5, n = 300, stride = 320, slots = tokens * topk;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(0.05f, 1.0f);
    // Sorted positions: a permutation of the rows; every seventh slot belongs to another rank (-1).
    std::vector<int32_t> pos(slots);
    for (int i = 0; i < slots; ++i) pos[i] = i;
    std::shuffle(pos.begin(), pos.end(), rng);
    for (int i = 0; i < slots; i += 7) pos[i] = -1;
    const uint16_t nan = 0x7FC0;
    // Tiles of 24 rows x 64 columns, swizzled: element (pos, c) at rows_tiled_offset (spelled out here).
    const int tile = 24;
    auto tiled = [&](int p, int c) {
        const int mb = p / tile, r = p % tile;
        return (size_t(mb) * (stride / 64) + c / 64) * tile * 64 + size_t(r) * 64 + size_t(((c / 8) % 8) ^ (r % 8)) * 8 + c % 8;
    };
    std::vector<uint16_t> by_slot(size_t(slots) * stride, nan), by_pos(size_t(slots) * stride, nan),
        by_tile(size_t((slots + tile - 1) / tile) * tile * stride, nan);
    for (int i = 0; i < slots; ++i) {
        if (pos[i] < 0) continue;  // its rows stay NaN: never read
        for (int c = 0; c < n; ++c) {
            const uint16_t v = float_to_bf16((rng() & 1 ? 1.0f : -1.0f) * u(rng));
            by_slot[size_t(i) * stride + c] = v;
            by_pos[size_t(pos[i]) * stride + c] = v;
            by_tile[tiled(pos[i], c)] = v;
        }
    }
    std::vector<double> want(size_t(tokens) * n, 0.0);
    for (int t = 0; t < tokens; ++t)
        for (int j = 0; j < topk; ++j)
            if (pos[t * topk + j] >= 0)
                for (int c = 0; c < n; ++c) want[size_t(t) * n + c] += bf16_to_float(by_slot[size_t(t * topk + j) * stride + c]);
    for (int row_tile : {0, tile}) {
        CAPTURE(row_tile);
        std::vector<uint16_t> out(size_t(tokens) * n, nan);
        MoeW4A16CombineParams p{};
        p.rows = addr(row_tile ? by_tile.data() : by_pos.data());
        p.rows_stride = stride;
        p.slot_pos = addr(pos.data());
        p.num_tokens = tokens;
        p.topk = topk;
        p.n = n;
        p.out = addr(out.data());
        p.out_stride = n;
        p.row_tile = row_tile;
        launch_moe_w4a16_combine(k, p, s);
        s.synchronize();
        long bad = 0;
        for (size_t i = 0; i < out.size(); ++i) {
            const double got = bf16_to_float(out[i]);
            if (!(std::fabs(got - want[i]) <= 1.0 / 128 * std::fabs(want[i]) + 1e-6)) ++bad;  // one bf16 rounding
        }
        CHECK(bad == 0);
    }
}

TEST_CASE("moe_w4a16 host layer matches the CPU reference") {
    HostKernelLoader loader;
    using F = W4Format;
    const auto silu = MoeActivation::silu_glu, situ = MoeActivation::situ_glu;
    const Case cases[] = {
        {"int4 silu uniform", F::int4_g32_bf16, silu, 256, 128, 16, 4, 40, "uniform", 1},
        {"mxfp4 situ tiles 2", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 40, "uniform", 2},
        {"one token top-16", F::mxfp4_g32_e8m0, situ, 256, 192, 64, 16, 1, "uniform", 1},
        {"skewed", F::int4_g32_bf16, silu, 256, 128, 32, 8, 100, "skewed", 2},
        {"hot expert tiles 4", F::int4_g32_bf16, situ, 256, 128, 16, 4, 150, "hot", 4},
        {"half the experts empty", F::mxfp4_g32_e8m0, silu, 256, 128, 32, 4, 60, "half_empty", 1},
        {"foreign experts", F::int4_g32_bf16, silu, 256, 128, 8, 4, 64, "foreign", 1},
        {"no local expert", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 1},
        {"odd sizes int4", F::int4_g32_bf16, silu, 224, 96, 5, 2, 33, "uniform", 1},
        {"odd sizes mxfp4", F::mxfp4_g32_e8m0, situ, 160, 160, 7, 3, 21, "uniform", 2},
        // The K2 / K3 expert shapes, whole (an EP slice) and TP8-sliced; few experts and tokens keep the
        // reference cheap.
        {"K2 expert 7168 x 2048", F::int4_g32_bf16, silu, 7168, 2048, 4, 2, 3, "uniform", 1},
        {"K2 TP8 slice 7168 x 256", F::int4_g32_bf16, silu, 7168, 256, 8, 4, 5, "skewed", 1},
        {"K3 expert 3584 x 3072", F::mxfp4_g32_e8m0, situ, 3584, 3072, 4, 2, 3, "uniform", 1},
        {"K3 TP8 slice 3584 x 384", F::mxfp4_g32_e8m0, situ, 3584, 384, 8, 4, 5, "skewed", 1},
    };
    for (const Case& c : cases) run_case(loader, c);
}

TEST_CASE("moe_w4a16 host layer in the prefill configuration (block_m 64) matches the CPU reference") {
    HostKernelLoader loader;
    using F = W4Format;
    const auto silu = MoeActivation::silu_glu, situ = MoeActivation::situ_glu;
    const Case cases[] = {
        {"prefill int4 silu skewed", F::int4_g32_bf16, silu, 256, 128, 12, 4, 300, "skewed", 0},
        {"prefill mxfp4 situ hot", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 260, "hot", 0},
        {"prefill foreign experts", F::int4_g32_bf16, situ, 256, 128, 8, 4, 200, "foreign", 0},
        {"prefill half empty", F::mxfp4_g32_e8m0, silu, 160, 96, 16, 4, 150, "half_empty", 0},
        {"prefill odd sizes", F::int4_g32_bf16, silu, 224, 96, 5, 2, 133, "uniform", 0},
        {"prefill no local expert", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 0},
        {"prefill K2 TP8 slice 7168 x 256", F::int4_g32_bf16, silu, 7168, 256, 4, 2, 40, "uniform", 0},
        {"prefill K3 TP8 slice 3584 x 384", F::mxfp4_g32_e8m0, situ, 3584, 384, 4, 2, 40, "uniform", 0},
    };
    for (const Case& c : cases) run_case(loader, c, true);
}

TEST_CASE("moe_w4a16 host launches check the kernel and the shapes") {
    HostKernelLoader loader;
    runtime::HostStream s;
    const moe_test::CheckpointBytes m = moe_test::random_matrix(W4Format::int4_g32_bf16, 128, 64, 1);
    const moe::PreparedMoeWeights w = moe::prepare_moe_weights(W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16,
                                                               false, 1, 128, 64, [&](int, int) { return m.view(); });
    const LoadedKernel& dq = loader.get(MoeW4A16Family::dequant(w, k_host));
    const LoadedKernel& rt = loader.get(MoeW4A16Family::routing(4, 1, k_host));
    std::vector<uint16_t> out(size_t(w.n_pad) * w.k_pad);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_dequant(dq, {addr(w.bytes.data()), addr(out.data()), w.n_pad, 128}, s),
                         doctest::Contains("does not match kernel"), InvalidArgument);
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_dequant(rt, {addr(w.bytes.data()), addr(out.data()), w.n_pad, w.k_pad}, s),
                         doctest::Contains("kernel is moe_w4a16"), InvalidArgument);
    MoeW4A16RoutingParams p{};
    p.num_experts = 5;
    p.topk = 1;
    CHECK_THROWS_WITH_AS(launch_moe_w4a16_routing(rt, p, s), doctest::Contains("5 experts, kernel built for 4"),
                         InvalidArgument);
    s.synchronize();  // nothing was enqueued
}

TEST_CASE("moe_w4a16 host layer picks its configuration like the device layer and refuses bad calls") {
    HostKernelLoader loader;
    std::vector<moe_test::CheckpointBytes> m;
    for (int p = 0; p < 3; ++p) m.push_back(random_matrix(W4Format::int4_g32_bf16, 64, 64, 40 + p));
    const moe::PreparedMoeWeights gu = moe::prepare_moe_weights(W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16,
                                                                true, 4, 64, 64, [&](int, int p) { return m[p].view(); });
    const moe::PreparedMoeWeights dn = moe::prepare_moe_weights(W4Format::int4_g32_bf16, moe::W4Layout::decode_mma16,
                                                                false, 4, 64, 64, [&](int, int) { return m[2].view(); });
    MoeW4A16HostOptions opt;
    opt.topk = 2;
    opt.max_tokens = 512;
    opt.rows_combine_min = 16;
    opt.prefill_min = 100;  // slots per expert: 4 experts -> from 400 slots = 200 tokens
    MoeW4A16HostLayer layer(loader, gu, dn, opt);
    CHECK(layer.config_for(7) == MoeW4A16HostConfig::decode_combined);
    CHECK(layer.config_for(8) == MoeW4A16HostConfig::decode_rows);
    CHECK(layer.config_for(199) == MoeW4A16HostConfig::decode_rows);
    CHECK(layer.config_for(200) == MoeW4A16HostConfig::prefill);
    runtime::HostStream s;
    std::vector<uint16_t> x(513 * 64), out(x.size());
    std::vector<int32_t> ids(513 * 2, 0);
    std::vector<float> w(ids.size(), 0.5f);
    CHECK_THROWS_AS(layer.forward(x.data(), ids.data(), w.data(), 513, out.data(), s), InvalidArgument);
    CHECK_THROWS_AS(layer.forward(nullptr, ids.data(), w.data(), 4, out.data(), s), InvalidArgument);
    CHECK_THROWS_AS(MoeW4A16HostLayer(loader, dn, gu, opt), InvalidArgument);  // swapped matrices
}
