// Test data and the CPU reference shared by the moe_w4a16 op cases: random checkpoint matrices in both
// formats, routings of several shapes, and the layer's expected output from the model's reference experts
// (model/reference/latent_moe.hpp: routed_experts) on the checkpoint weights dequantised exactly to fp32.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jit/families/moe_w4a16_common.hpp"
#include "model/reference/latent_moe.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/bf16.hpp"

namespace kiln::ops::moe_test {

namespace moe = kiln::model::weights;
using MoeActivation = kiln::jit::moe::Activation;

struct CheckpointBytes {
    std::vector<std::byte> packed, scale;
    moe::CheckpointMatrix view() const { return {packed, scale}; }
};

// Random checkpoint bytes; any_scale: every representable scale (wide MXFP4 exponents, tiny and large
// bf16 scales), not only realistic ones.
inline CheckpointBytes random_matrix(moe::W4Format f, int n, int k, uint64_t seed, bool any_scale = false) {
    std::mt19937_64 rng(seed);
    CheckpointBytes m;
    const bool int4 = f == moe::W4Format::int4_g32_bf16;
    m.packed.resize(int4 ? size_t(n) * (k / 8) * 4 : size_t(n) * (k / 2));
    for (auto& b : m.packed) b = std::byte(rng());
    const size_t groups = size_t(n) * (k / 32);
    if (int4) {
        m.scale.resize(groups * 2);
        std::uniform_real_distribution<float> sd(0.004f, 0.012f);
        for (size_t i = 0; i < groups; ++i) {
            uint16_t b = runtime::float_to_bf16(sd(rng));
            if (any_scale)
                do b = static_cast<uint16_t>(rng()); while ((b & 0x7F80) == 0x7F80);
            std::memcpy(m.scale.data() + 2 * i, &b, 2);
        }
    } else {
        m.scale.resize(groups);
        for (auto& b : m.scale) b = std::byte(any_scale ? rng() % 255 : 117 + rng() % 5);
    }
    return m;
}

inline float value(moe::W4Format f, const CheckpointBytes& m, int k, int r, int c) {
    return f == moe::W4Format::int4_g32_bf16 ? moe::int4_value(m.packed, m.scale, k, r, c)
                                             : moe::mxfp4_value(m.packed, m.scale, k, r, c);
}

struct Routing {
    int tokens = 0, topk = 0;
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

// uniform, skewed (popularity ~ 1/(rank+1)^1.2), hot (every token hits expert 3), half_empty, foreign
// (a third of the slots belong to another rank: -1), none (no local expert at all).
inline Routing make_routing(const std::string& kind, int tokens, int topk, int experts, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Routing r{tokens, topk, {}, {}};
    r.ids.resize(size_t(tokens) * topk);
    std::vector<double> pop(experts, 1.0);
    if (kind == "skewed")
        for (int e = 0; e < experts; ++e) pop[e] = 1.0 / std::pow(double(e + 1), 1.2);
    const int lo = kind == "half_empty" ? experts / 2 : 0;
    for (int t = 0; t < tokens; ++t) {
        std::set<int> seen;
        int j = 0;
        if (kind == "hot") {
            r.ids[t * topk + j++] = 3 % experts;
            seen.insert(3 % experts);
        }
        std::discrete_distribution<int> dd(pop.begin() + lo, pop.end());
        while (j < topk) {
            const int e = lo + dd(rng);
            if (seen.insert(e).second) r.ids[t * topk + j++] = e;
        }
    }
    if (kind == "foreign")
        for (size_t i = 0; i < r.ids.size(); i += 3) r.ids[i] = -1;
    if (kind == "none") std::fill(r.ids.begin(), r.ids.end(), -1);
    std::uniform_real_distribution<float> wd(0.05f, 1.0f);
    r.weights.resize(r.ids.size());
    for (auto& w : r.weights) w = wd(rng);
    return r;
}

// The layer's expected output [tokens, hidden] in double: for every local expert with routed slots, its
// three matrices dequantised exactly to fp32 and model::reference::routed_experts on the rows routed to
// it (top-1 with their router weights); slots of other ranks (-1) contribute nothing. `for_each_expert`
// runs body(e) for e in [0, experts), serially or in parallel; the sums into the result are locked.
inline std::vector<double> reference_output(moe::W4Format fmt, MoeActivation act, int hidden, int inter,
                                            const std::vector<CheckpointBytes>& gate,
                                            const std::vector<CheckpointBytes>& up,
                                            const std::vector<CheckpointBytes>& down, const Routing& r,
                                            const std::vector<uint16_t>& x,
                                            const std::function<void(int, const std::function<void(int)>&)>& for_each_expert) {
    namespace ref = kiln::model::reference;
    const int experts = static_cast<int>(gate.size());
    std::vector<double> out(size_t(r.tokens) * hidden, 0.0);
    std::vector<std::vector<size_t>> slots(experts);
    for (size_t s = 0; s < r.ids.size(); ++s)
        if (r.ids[s] >= 0 && r.ids[s] < experts) slots[r.ids[s]].push_back(s);
    const ref::GluActivation glu = act == MoeActivation::silu_glu ? ref::GluActivation::silu() : ref::GluActivation::situ();
    std::mutex mu;
    for_each_expert(experts, [&](int e) {
        if (slots[e].empty()) return;
        ref::ExpertWeights w{ref::Matrix(inter, hidden), ref::Matrix(inter, hidden), ref::Matrix(hidden, inter)};
        for (int i = 0; i < inter; ++i)
            for (int k = 0; k < hidden; ++k) {
                w.w1.at(i, k) = value(fmt, gate[e], hidden, i, k);
                w.w3.at(i, k) = value(fmt, up[e], hidden, i, k);
            }
        for (int n = 0; n < hidden; ++n)
            for (int i = 0; i < inter; ++i) w.w2.at(n, i) = value(fmt, down[e], inter, n, i);
        ref::Matrix z(slots[e].size(), hidden);
        std::vector<int32_t> ids(slots[e].size(), 0);
        std::vector<float> wts(slots[e].size());
        for (size_t j = 0; j < slots[e].size(); ++j) {
            const size_t t = slots[e][j] / r.topk;
            for (int k = 0; k < hidden; ++k) z.at(j, k) = runtime::bf16_to_float(x[t * hidden + k]);
            wts[j] = r.weights[slots[e][j]];
        }
        const ref::Matrix y = ref::routed_experts({&w, 1}, glu, z, ids, wts, 1);
        std::lock_guard<std::mutex> lock(mu);
        for (size_t j = 0; j < slots[e].size(); ++j) {
            const size_t t = slots[e][j] / r.topk;
            for (int n = 0; n < hidden; ++n) out[t * hidden + n] += y.at(j, n);
        }
    });
    return out;
}

// One random layer problem: each expert's checkpoint matrices, both weight kinds in the kernel layout,
// a routing of `routing` kind, random bf16 activations and the reference output. Seeds follow `seed`;
// `for_each_expert` as in reference_output (it also generates the matrices).
struct Problem {
    std::vector<CheckpointBytes> gate, up, down;
    moe::PreparedMoeWeights wgu, wdn;
    Routing routing;
    std::vector<uint16_t> x;
    std::vector<double> ref;
};
inline Problem make_problem(moe::W4Format fmt, MoeActivation act, int experts, int hidden, int inter,
                            const std::string& routing, int tokens, int topk, uint64_t seed,
                            const std::function<void(int, const std::function<void(int)>&)>& for_each_expert) {
    Problem pb;
    pb.gate.resize(experts);
    pb.up.resize(experts);
    pb.down.resize(experts);
    for_each_expert(experts, [&](int e) {
        pb.gate[e] = random_matrix(fmt, inter, hidden, seed * 7 + e * 3);
        pb.up[e] = random_matrix(fmt, inter, hidden, seed * 7 + e * 3 + 1);
        pb.down[e] = random_matrix(fmt, hidden, inter, seed * 7 + e * 3 + 2);
    });
    pb.wgu = moe::prepare_moe_weights(fmt, moe::W4Layout::decode_mma16, true, experts, inter, hidden,
                                      [&](int e, int part) { return part == 0 ? pb.gate[e].view() : pb.up[e].view(); });
    pb.wdn = moe::prepare_moe_weights(fmt, moe::W4Layout::decode_mma16, false, experts, hidden, inter,
                                      [&](int e, int) { return pb.down[e].view(); });
    pb.routing = make_routing(routing, tokens, topk, experts, seed + 1);
    pb.x.resize(size_t(tokens) * hidden);
    std::mt19937_64 rng(seed + 2);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : pb.x) v = runtime::float_to_bf16(nd(rng));
    pb.ref = reference_output(fmt, act, hidden, inter, pb.gate, pb.up, pb.down, pb.routing, pb.x, for_each_expert);
    return pb;
}

// Elements of a dequantiser's output ([n_pad, k_pad] bf16 in layout row order, expert 0) that differ
// from the unfused bf16 form of the prepared weights; padding must be exact zeros.
inline long dequant_mismatches(const moe::PreparedMoeWeights& w, int n, int k, const std::vector<uint16_t>& got) {
    std::vector<float> logical(size_t(w.gate_up ? 2 : 1) * n * k);
    moe::dequantize_prepared(w, 0, logical);
    long bad = 0;
    for (int row = 0; row < w.n_pad; ++row) {
        int part = 0, lrow = row;
        bool pad = row >= n;
        if (w.gate_up) {
            const int i = (row / 16) * 8 + row % 8;
            part = (row % 16) / 8;
            lrow = i;
            pad = i >= n;
        }
        for (int col = 0; col < w.k_pad; ++col) {
            const float g = runtime::bf16_to_float(got[size_t(row) * w.k_pad + col]);
            if (pad || col >= k) {
                bad += g != 0.0f;
                continue;
            }
            const uint16_t want = runtime::float_to_bf16(logical[(size_t(part) * n + lrow) * k + col]);
            if (got[size_t(row) * w.k_pad + col] != want && !(g == 0.0f && runtime::bf16_to_float(want) == 0.0f)) ++bad;
        }
    }
    return bad;
}

}  // namespace kiln::ops::moe_test
