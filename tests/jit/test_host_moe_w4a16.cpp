// moe_w4a16 on the host target: the dequantiser is bit-identical to the unfused bf16 form, routing prep
// builds the m-block structure the GEMMs read, and the whole layer (routing, gate_up + GLU, down +
// combine) matches the CPU reference (model/reference routed_experts on the checkpoint weights
// dequantised exactly) within bf16 tolerance for both formats and activations, skewed routings, empty experts, a hot expert, tokens with no local
// expert and odd sizes, in the decode configurations and in the prefill one (block_m 64 routing, the
// prefill gate_up and down-rows kinds, combine). Outputs are poisoned (NaN) before every run; every case
// runs twice (the layer must leave its accumulator clean).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include "jit/family_moe_w4a16.hpp"
#include "jit/host_kernel_loader.hpp"
#include "jit/host_launch.hpp"
#include "jit/moe_w4a16_weights.hpp"
#include "tests/jit/moe_w4a16_test_data.hpp"
#include "runtime/bf16.hpp"
#include "runtime/host_executor.hpp"

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

// The launches of one routed-expert layer on a host stream, with the workspace sized as the device
// layer sizes it (jit/moe_w4a16.cpp): routing, gate_up, down combined per token, or (rows) down in its
// rows mode followed by the combine kernel. prefill: the layer's prefill configuration (routing with
// block_m 64, the prefill kinds, rows + combine).
struct HostLayer {
    const LoadedKernel *routing = nullptr, *gate_up = nullptr, *down = nullptr, *combine = nullptr;
    moe::PreparedMoeWeights gu, dn;
    int topk = 0, max_tokens = 0, tiles = 1, cap = 0;
    bool rows = false;
    std::vector<int32_t> counts, nmb, info, sorted_token, counters, slot_pos;
    std::vector<float> sorted_weight, acc;
    std::vector<uint16_t> inter, down_rows;

    HostLayer(HostKernelLoader& loader, const moe::PreparedMoeWeights& g, const moe::PreparedMoeWeights& d,
              MoeActivation act, int topk_, int max_tokens_, int tiles_, bool rows_, bool prefill = false)
        : gu(g), dn(d), topk(topk_), max_tokens(max_tokens_), tiles(prefill ? 8 : tiles_), rows(rows_ || prefill) {
        routing = &loader.get(MoeW4A16Family::routing(dn.experts, tiles, k_host));
        if (prefill) {
            gate_up = &loader.get(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_gate_up, gu, act, k_host));
            down = &loader.get(MoeW4A16Family::prefill_gemm(MoeW4A16Kernel::prefill_down, dn, act, k_host));
            REQUIRE(gate_up->desc.config.block_m == 64);
            REQUIRE(down->desc.config.block_m == 64);
        } else {
            gate_up = &loader.get(MoeW4A16Family::gemm(MoeW4A16Kernel::gate_up, gu, act, tiles, k_host));
            down = &loader.get(MoeW4A16Family::gemm(MoeW4A16Kernel::down, dn, act, tiles, k_host,
                                                    MoeW4A16Schedule::static_shares, rows));
        }
        if (rows) combine = &loader.get(MoeW4A16Family::combine(k_host));
        const int64_t slots = int64_t(max_tokens) * topk;
        const int bm = 8 * tiles;
        cap = static_cast<int>(slots / bm + std::min<int64_t>(dn.experts, slots) + 1);
        counts.assign(dn.experts, -7);
        nmb.assign(1, -7);
        info.assign(size_t(cap) * 2, -7);
        sorted_token.assign(size_t(cap) * bm, -7);
        sorted_weight.assign(size_t(cap) * bm, -7.0f);
        inter.assign(size_t(cap) * bm * dn.k_pad, 0x7fc1);
        acc.assign(size_t(max_tokens) * dn.n_pad, 0.0f);
        counters.assign(dn.n_pad / 16, 0);
        if (rows) {
            slot_pos.assign(size_t(slots), -7);
            down_rows.assign(size_t(cap) * bm * dn.n, 0x7fc1);
        }
    }

    void forward(const std::vector<uint16_t>& x, const Routing& r, std::vector<uint16_t>& out,
                 runtime::HostStream& s) {
        MoeW4A16RoutingParams rp{};
        rp.topk_ids = addr(r.ids.data());
        rp.topk_weights = addr(r.weights.data());
        rp.expert_count = addr(counts.data());
        rp.num_mblocks = addr(nmb.data());
        rp.mblock_info = addr(info.data());
        rp.sorted_token = addr(sorted_token.data());
        rp.sorted_weight = addr(sorted_weight.data());
        rp.num_tokens = r.tokens;
        rp.topk = topk;
        rp.num_experts = dn.experts;
        rp.mblock_cap = cap;
        if (rows) rp.slot_pos = addr(slot_pos.data());
        launch_moe_w4a16_routing(*routing, rp, s);

        MoeW4A16DecodeParams g{};
        g.weights = addr(gu.bytes.data());
        g.expert_stride = gu.expert_stride;
        g.x = addr(x.data());
        g.x_stride = dn.n;
        g.k_real = gu.k;
        g.k_pad = gu.k_pad;
        g.n_pad = gu.n_pad;
        g.n_real = gu.n_pad;
        g.num_mblocks = rp.num_mblocks;
        g.mblock_info = rp.mblock_info;
        g.sorted_token = rp.sorted_token;
        g.sorted_weight = rp.sorted_weight;
        g.num_tokens = r.tokens;
        g.inter = addr(inter.data());
        g.inter_stride = dn.k_pad;
        launch_moe_w4a16_gemm(*gate_up, g, s);

        MoeW4A16DecodeParams d = g;
        d.weights = addr(dn.bytes.data());
        d.expert_stride = dn.expert_stride;
        d.x = addr(inter.data());
        d.x_stride = dn.k_pad;
        d.k_real = dn.k;
        d.k_pad = dn.k_pad;
        d.n_pad = dn.n_pad;
        d.n_real = dn.n;
        d.inter = 0;
        d.inter_stride = 0;
        d.acc = addr(acc.data());
        d.acc_stride = dn.n_pad;
        d.out = addr(out.data());
        d.out_stride = dn.n;
        d.counters = addr(counters.data());
        if (rows) {
            d.acc = 0;
            d.acc_stride = 0;
            d.counters = 0;
            d.out = addr(down_rows.data());
        }
        launch_moe_w4a16_gemm(*down, d, s);
        if (!rows) return;
        MoeW4A16CombineParams cp{};
        cp.rows = addr(down_rows.data());
        cp.rows_stride = dn.n;
        cp.slot_pos = addr(slot_pos.data());
        cp.num_tokens = r.tokens;
        cp.topk = topk;
        cp.n = dn.n;
        cp.out = addr(out.data());
        cp.out_stride = dn.n;
        launch_moe_w4a16_combine(*combine, cp, s);
    }
};

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
    std::vector<moe_test::CheckpointBytes> gate(c.experts), up(c.experts), down(c.experts);
    for (int e = 0; e < c.experts; ++e) {
        gate[e] = random_matrix(c.fmt, c.inter, c.hidden, seed * 7 + e * 3);
        up[e] = random_matrix(c.fmt, c.inter, c.hidden, seed * 7 + e * 3 + 1);
        down[e] = random_matrix(c.fmt, c.hidden, c.inter, seed * 7 + e * 3 + 2);
    }
    const moe::PreparedMoeWeights wgu =
        moe::prepare_moe_weights(c.fmt, moe::W4Layout::decode_mma16, true, c.experts, c.inter, c.hidden,
                                 [&](int e, int part) { return part == 0 ? gate[e].view() : up[e].view(); });
    const moe::PreparedMoeWeights wdn = moe::prepare_moe_weights(
        c.fmt, moe::W4Layout::decode_mma16, false, c.experts, c.hidden, c.inter, [&](int e, int) { return down[e].view(); });
    const Routing r = make_routing(c.routing, c.tokens, c.topk, c.experts, seed + 1);
    std::vector<uint16_t> x(size_t(c.tokens) * c.hidden);
    std::mt19937_64 rng(seed + 2);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = float_to_bf16(nd(rng));

    // Reference: the model's routed experts on the exactly dequantised weights.
    const std::vector<double> ref = moe_test::reference_output(
        c.fmt, c.act, c.hidden, c.inter, gate, up, down, r, x,
        [](int n, const std::function<void(int)>& body) {
            for (int e = 0; e < n; ++e) body(e);
        });

    for (bool rows : {false, true}) {
    if (prefill && !rows) continue;  // the prefill configuration always writes rows
    CAPTURE(rows);
    CAPTURE(prefill);
    HostLayer layer(loader, wgu, wdn, c.act, c.topk, c.tokens, c.tiles, rows, prefill);
    runtime::HostStream s;
    for (int rep = 0; rep < 2; ++rep) {
        CAPTURE(rep);
        std::vector<uint16_t> out(size_t(c.tokens) * c.hidden, 0xFFFF);  // NaN
        layer.forward(x, r, out, s);
        s.synchronize();
        double num = 0, den = 0;
        long nans = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
            const float g = bf16_to_float(out[i]);
            if (!std::isfinite(g)) {
                ++nans;
                continue;
            }
            num += (g - ref[i]) * (g - ref[i]);
            den += ref[i] * ref[i];
        }
        const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
        CHECK(nans == 0);
        CHECK(err <= 1e-2);
        if (den == 0) CHECK(num == 0);  // no local expert: exact zeros
        for (float a : layer.acc) REQUIRE(a == 0.0f);  // left clean for the next call
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
            std::vector<float> logical(size_t(gate_up ? 2 : 1) * n * k);
            moe::dequantize_prepared(w, 0, logical);
            const LoadedKernel& kern = loader.get(MoeW4A16Family::dequant(w, k_host));
            std::vector<uint16_t> got(size_t(w.n_pad) * w.k_pad, 0xFFFF);
            launch_moe_w4a16_dequant(kern, {addr(w.bytes.data()), addr(got.data()), w.n_pad, w.k_pad}, s);
            s.synchronize();
            long bad = 0;
            for (int row = 0; row < w.n_pad; ++row) {
                int part = 0, lrow = row;
                bool pad = row >= n;
                if (gate_up) {
                    const int i = (row / 16) * 8 + row % 8;
                    part = (row % 16) / 8;
                    lrow = i;
                    pad = i >= n;
                }
                for (int col = 0; col < w.k_pad; ++col) {
                    const uint16_t g = got[size_t(row) * w.k_pad + col];
                    if (pad || col >= k) {
                        bad += bf16_to_float(g) != 0.0f;
                        continue;
                    }
                    const uint16_t want = float_to_bf16(logical[(size_t(part) * n + lrow) * k + col]);
                    if (g != want && !(bf16_to_float(g) == 0.0f && bf16_to_float(want) == 0.0f)) ++bad;
                }
            }
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
