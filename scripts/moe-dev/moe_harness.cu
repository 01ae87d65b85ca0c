// Development harness for the moe_w4a16 kernels: builds with nvcc from the same device templates the
// JIT compiles, checks them against an fp32 CPU reference and times the benchmark scenarios.
//
//   moe_harness test dequant|routing|moe|moe-real|all [--variants v3,v5,...]
//   moe_harness bench [--routing-dir DIR] [--json FILE] [--only NAME,...] [--iters N] [--variants LIST]
//                     [--prefill-variants LIST] [--probe 0|1]
//
// Variants (kernel schedule and down combine; see variant_by_name): v3 static shares, v4 dynamic
// claiming of whole-K items, v5 dynamic with K chunks, v5x the same claimed across m-blocks first,
// v5w windows of 8 m-blocks (L2 reuse), v5s one-stage items (protocol stress), *r the down GEMM
// writes rows and a separate kernel combines them (no fp32 atomics); auto = the kiln layer's unfused
// automatic choices per call (the fused decode kernel, moe_w4a16_decode_fused, is measured through
// kiln itself: `kiln bench moe`). p64 / p128: the prefill GEMM (moe_w4a16_prefill.cuh) with m-blocks of 64 / 128 rows
// for gate_up and down (rows + combine); pauto picks 64 or 128 from the routed rows per active expert;
// p64s / p128s the same with one 16-row block per warp (each weight word dequantised once per CTA);
// p64s2: p64s with two 64-wide records per K step (block_k 128) where k_pad % 128 == 0, else one.
//
// Exit status: 0 all checks passed, 1 a check failed, 2 usage, 3 CUDA error, 4 a kernel did not finish
// within its deadline (hang), 77 no device.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.cuh"
#include "harness_kernels.cuh"
#include "jit/moe_w4a16_schedule.hpp"
#include "jit/moe_w4a16_weights.hpp"

using namespace kiln::jit::moe;
using harness::DecodeKernel;

namespace {

int g_num_sms = 0;
int g_failures = 0;

// ---------------------------------------------------------------------------------------------------
// bf16 helpers

uint16_t f2bf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return 0x7FC0;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
float bf2f(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

int parallelism() { return std::max(1u, std::thread::hardware_concurrency()); }

template <typename F>
void parallel_for(int n, F&& f) {
    std::atomic<int> next{0};
    const int nt = std::min(n, parallelism());
    std::vector<std::thread> th;
    for (int i = 0; i < nt; ++i)
        th.emplace_back([&]() {
            for (int j = next.fetch_add(1); j < n; j = next.fetch_add(1)) f(j);
        });
    for (auto& t : th) t.join();
}

// ---------------------------------------------------------------------------------------------------
// Random checkpoint-format weights

struct HostMatrix {
    std::vector<std::byte> packed, scale;
    CheckpointMatrix view() const { return {packed, scale}; }
};

HostMatrix random_matrix(W4Format f, int n, int k, uint64_t seed, bool wide = false) {
    std::mt19937_64 rng(seed);
    HostMatrix m;
    const size_t pb = f == W4Format::int4_g32_bf16 ? size_t(n) * (k / 8) * 4 : size_t(n) * (k / 2);
    m.packed.resize(pb);
    for (size_t i = 0; i < pb; i += 8) {
        uint64_t v = rng();
        std::memcpy(m.packed.data() + i, &v, std::min<size_t>(8, pb - i));
    }
    const size_t groups = size_t(n) * (k / 32);
    if (f == W4Format::int4_g32_bf16) {
        m.scale.resize(groups * 2);
        std::uniform_real_distribution<float> sd(0.004f, 0.012f);
        for (size_t i = 0; i < groups; ++i) {
            const uint16_t b = f2bf(sd(rng));
            std::memcpy(m.scale.data() + 2 * i, &b, 2);
        }
    } else {
        m.scale.resize(groups);
        std::uniform_int_distribution<int> sd(wide ? 117 : 117, wide ? 140 : 121);
        for (auto& b : m.scale) b = std::byte(sd(rng));
    }
    return m;
}

struct HostExperts {
    W4Format fmt;
    int E, H, I;
    std::vector<HostMatrix> gate, up, down;  // [I, H], [I, H], [H, I]
};

HostExperts random_experts(W4Format fmt, int E, int H, int I, uint64_t seed) {
    HostExperts x{fmt, E, H, I, {}, {}, {}};
    x.gate.resize(E);
    x.up.resize(E);
    x.down.resize(E);
    parallel_for(E, [&](int e) {
        x.gate[e] = random_matrix(fmt, I, H, seed * 1000003 + e * 3 + 0);
        x.up[e] = random_matrix(fmt, I, H, seed * 1000003 + e * 3 + 1);
        x.down[e] = random_matrix(fmt, H, I, seed * 1000003 + e * 3 + 2);
    });
    return x;
}

float ckpt_value(W4Format f, const HostMatrix& m, int k, int r, int c) {
    return f == W4Format::int4_g32_bf16 ? int4_value(m.packed, m.scale, k, r, c) : mxfp4_value(m.packed, m.scale, k, r, c);
}
void dequant_full(W4Format f, const HostMatrix& m, int n, int k, std::vector<float>& out) {
    out.resize(size_t(n) * k);
    for (int r = 0; r < n; ++r)
        for (int c = 0; c < k; ++c) out[size_t(r) * k + c] = ckpt_value(f, m, k, r, c);
}

// ---------------------------------------------------------------------------------------------------
// Routing

struct Routing {
    int M = 0, topk = 0, E = 0;
    std::vector<int32_t> ids;     // [M, topk], -1 = not local
    std::vector<float> weights;   // [M, topk]
};

std::vector<int> pick_distinct(std::mt19937_64& rng, int E, int k) {
    std::vector<int> out;
    std::set<int> seen;
    std::uniform_int_distribution<int> d(0, E - 1);
    while (int(out.size()) < k) {
        int e = d(rng);
        if (seen.insert(e).second) out.push_back(e);
    }
    return out;
}

void fill_weights(Routing& r, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> wd(0.05f, 1.0f);
    r.weights.resize(size_t(r.M) * r.topk);
    for (int t = 0; t < r.M; ++t) {
        float s = 0;
        for (int j = 0; j < r.topk; ++j) s += (r.weights[t * r.topk + j] = wd(rng));
        for (int j = 0; j < r.topk; ++j) r.weights[t * r.topk + j] /= s;
    }
}

// kinds: uniform, skewed, hot, half_empty, balanced
Routing make_routing(const std::string& kind, int M, int topk, int E, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Routing r{M, topk, E, {}, {}};
    r.ids.resize(size_t(M) * topk);
    if (kind == "balanced") {
        // every expert gets exactly M*topk/E rows (M*topk divisible by E)
        std::vector<int> perm(E);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        const int stride = E / topk;
        for (int t = 0; t < M; ++t)
            for (int j = 0; j < topk; ++j) r.ids[t * topk + j] = perm[(t + j * stride) % E];
    } else {
        std::vector<double> pop(E, 1.0);
        if (kind == "skewed")
            for (int e = 0; e < E; ++e) pop[e] = 1.0 / std::pow(double(e + 1), 1.2);
        const int lo = kind == "half_empty" ? E / 2 : 0;
        for (int t = 0; t < M; ++t) {
            std::set<int> seen;
            int j = 0;
            if (kind == "hot") {
                r.ids[t * topk + j++] = 3 % E;
                seen.insert(3 % E);
            }
            std::discrete_distribution<int> dd(pop.begin() + lo, pop.end());
            while (j < topk) {
                int e = lo + dd(rng);
                if (seen.insert(e).second) r.ids[t * topk + j++] = e;
            }
        }
    }
    if (kind == "none") std::fill(r.ids.begin(), r.ids.end(), -1);
    fill_weights(r, rng);
    return r;
}

// Expert-parallel routing: B tokens pick topk of E_local * ranks experts uniformly; the rank with the
// most distinct experts is simulated: its tokens (those with at least one local expert) keep their
// local slots, other slots are -1.
Routing make_ep_routing(int B, int topk, int E_local, int ranks, uint64_t seed, bool compact = true) {
    std::mt19937_64 rng(seed);
    const int Eg = E_local * ranks;
    std::vector<std::vector<int>> picks(B);
    for (int t = 0; t < B; ++t) picks[t] = pick_distinct(rng, Eg, topk);
    int best = 0, best_count = -1;
    for (int rk = 0; rk < ranks; ++rk) {
        std::set<int> s;
        for (auto& p : picks)
            for (int e : p)
                if (e / E_local == rk) s.insert(e);
        if (int(s.size()) > best_count) best_count = int(s.size()), best = rk;
    }
    Routing all{B, topk, E_local, {}, {}};
    all.ids.assign(size_t(B) * topk, -1);
    for (int t = 0; t < B; ++t)
        for (int j = 0; j < topk; ++j) {
            int e = picks[t][j];
            all.ids[t * topk + j] = (e / E_local == best) ? e % E_local : -1;
        }
    fill_weights(all, rng);
    Routing r{0, topk, E_local, {}, {}};
    for (int t = 0; t < B; ++t) {
        bool any = false;
        for (int j = 0; j < topk; ++j) any |= all.ids[t * topk + j] >= 0;
        if (!any && compact) continue;
        r.ids.insert(r.ids.end(), all.ids.begin() + t * topk, all.ids.begin() + (t + 1) * topk);
        r.weights.insert(r.weights.end(), all.weights.begin() + t * topk, all.weights.begin() + (t + 1) * topk);
        ++r.M;
    }
    return r;
}

std::vector<int> expert_counts(const Routing& r) {
    std::vector<int> c(r.E, 0);
    for (int v : r.ids)
        if (v >= 0 && v < r.E) ++c[v];
    return c;
}

// ---------------------------------------------------------------------------------------------------
// Device state for one MoE layer

struct DevWeights {
    PreparedMoeWeights meta;  // bytes emptied after upload
    uint8_t* d = nullptr;
    int copies = 1;           // rotation copies back to back
};

DevWeights upload(PreparedMoeWeights w) {
    DevWeights d;
    CK(cudaMalloc(&d.d, w.bytes.size()));
    CK(cudaMemcpy(d.d, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    w.bytes.clear();
    w.bytes.shrink_to_fit();
    d.meta = std::move(w);
    return d;
}

struct Workspace {
    int M = 0, topk = 0, E = 0, tiles = 1, bm = 8;
    int H = 0, I_pad = 0, n_pad_down = 0, n_pad_gu = 0;
    int mblock_cap = 0;  // m-blocks of bm rows (the decode block_m)
    size_t row_cap = 0;  // sorted rows allocated: enough for any block_m up to kMaxBlockM
    int split_cap = 0;  // gate_up split-K scratch items
    int32_t *ids = nullptr, *counts = nullptr, *nmb = nullptr, *sorted_token = nullptr, *counters = nullptr;
    int32_t *work = nullptr, *split_cnt = nullptr, *slot_pos = nullptr;
    float *wts = nullptr, *sorted_weight = nullptr, *acc = nullptr, *split_acc = nullptr;
    int2* mblock_info = nullptr;
    uint16_t *x = nullptr, *inter = nullptr, *out = nullptr, *rows = nullptr;
};

constexpr int kMaxBlockM = 128;

// m-blocks the routing may emit for block_m rows per m-block (the host's capacity, no device read).
int mblock_cap_for(long long slots, int E, int block_m) {
    return int(slots / block_m + std::min<long long>(E, slots) + 1);
}

Workspace make_workspace(int M, int topk, int E, int tiles, int H, const DevWeights& gu, const DevWeights& dn) {
    Workspace w;
    w.M = M;
    w.topk = topk;
    w.E = E;
    w.tiles = tiles;
    w.bm = 8 * tiles;
    w.H = H;
    w.I_pad = dn.meta.k_pad;
    w.n_pad_down = dn.meta.n_pad;
    w.n_pad_gu = gu.meta.n_pad;
    const long long slots = (long long)M * topk;
    w.mblock_cap = mblock_cap_for(slots, E, w.bm);
    w.row_cap = std::max(size_t(w.mblock_cap) * w.bm, size_t(mblock_cap_for(slots, E, kMaxBlockM)) * kMaxBlockM);
    const size_t rows = w.row_cap;
    CK(cudaMalloc(&w.ids, std::max<size_t>(1, slots) * 4));
    CK(cudaMalloc(&w.wts, std::max<size_t>(1, slots) * 4));
    CK(cudaMalloc(&w.counts, E * 4));
    CK(cudaMalloc(&w.nmb, 4));
    CK(cudaMalloc(&w.mblock_info, w.mblock_cap * sizeof(int2)));
    CK(cudaMalloc(&w.sorted_token, rows * 4));
    CK(cudaMalloc(&w.sorted_weight, rows * 4));
    CK(cudaMalloc(&w.counters, (w.n_pad_down / 16) * 4));
    CK(cudaMemset(w.counters, 0, (w.n_pad_down / 16) * 4));
    CK(cudaMalloc(&w.acc, std::max<size_t>(1, size_t(M)) * w.n_pad_down * 4));
    CK(cudaMemset(w.acc, 0, std::max<size_t>(1, size_t(M)) * w.n_pad_down * 4));
    CK(cudaMalloc(&w.x, std::max<size_t>(1, size_t(M)) * H * 2));
    CK(cudaMalloc(&w.inter, rows * w.I_pad * 2));
    CK(cudaMalloc(&w.out, std::max<size_t>(1, size_t(M)) * H * 2));
    // dynamic schedule: claim counters (gate_up [0, 1], down [2, 3]) and the gate_up split-K scratch
    CK(cudaMalloc(&w.work, 4 * 4));
    CK(cudaMemset(w.work, 0, 4 * 4));
    w.split_cap = kiln::jit::moe::split_scratch_items(1 << 30, w.bm);
    CK(cudaMalloc(&w.split_acc, size_t(w.split_cap) * 128 * w.bm * 4));
    CK(cudaMemset(w.split_acc, 0, size_t(w.split_cap) * 128 * w.bm * 4));
    CK(cudaMalloc(&w.split_cnt, size_t(w.split_cap) * 4 * 4));
    CK(cudaMemset(w.split_cnt, 0, size_t(w.split_cap) * 4 * 4));
    // rows mode of down: one bf16 row per sorted position, and each slot's position
    CK(cudaMalloc(&w.slot_pos, std::max<size_t>(1, slots) * 4));
    CK(cudaMalloc(&w.rows, rows * w.n_pad_down * 2));
    return w;
}

void free_workspace(Workspace& w) {
    cudaFree(w.ids); cudaFree(w.wts); cudaFree(w.counts); cudaFree(w.nmb); cudaFree(w.mblock_info);
    cudaFree(w.sorted_token); cudaFree(w.sorted_weight); cudaFree(w.counters); cudaFree(w.acc);
    cudaFree(w.x); cudaFree(w.inter); cudaFree(w.out);
    cudaFree(w.work); cudaFree(w.split_acc); cudaFree(w.split_cnt); cudaFree(w.slot_pos); cudaFree(w.rows);
    w = Workspace{};
}

// The state every call must leave as it found it; reset before each variant so that one variant's
// failure cannot be blamed on the next.
void reset_call_state(Workspace& w) {
    CK(cudaMemset(w.work, 0, 4 * 4));
    CK(cudaMemset(w.split_acc, 0, size_t(w.split_cap) * 128 * w.bm * 4));
    CK(cudaMemset(w.split_cnt, 0, size_t(w.split_cap) * 4 * 4));
    CK(cudaMemset(w.counters, 0, (w.n_pad_down / 16) * 4));
    CK(cudaMemset(w.acc, 0, std::max<size_t>(1, size_t(w.M)) * w.n_pad_down * 4));
}

void upload_routing(Workspace& w, const Routing& r) {
    if (r.M == 0) return;
    CK(cudaMemcpy(w.ids, r.ids.data(), r.ids.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w.wts, r.weights.data(), r.weights.size() * 4, cudaMemcpyHostToDevice));
}

int fmt_code(W4Format f) { return f == W4Format::int4_g32_bf16 ? kiln_dev::moe::kFormatInt4 : kiln_dev::moe::kFormatMxfp4; }

// A kernel configuration measured side by side with the others.
struct Variant {
    std::string name;
    int sched = 0;        // 0 static shares (v3), 1 dynamic claiming
    int chunk = 0;        // dynamic: 0 whole K, -1 automatic (decode_split), -2 one pipeline stage per item
    int window = 1;       // dynamic claim order: m-blocks per window
    bool rows = false;    // down writes bf16 rows, moe_w4a16_combine sums them (no fp32 atomics)
    bool automatic = false;  // the kiln layer's automatic choices per call (jit/moe_w4a16.cpp)
    int prefill = 0;      // prefill GEMM for both: block_m 64 or 128; -1 chosen from rows per active expert
    int prefill_rb = 2;   // prefill GEMM: 16-row blocks per warp (1: each weight word dequantised once per CTA)
    int prefill_recs = 1; // prefill GEMM: records per K step (2 applies where k_pad % 128 == 0)
};

bool variant_by_name(const std::string& n, Variant& v) {
    v = Variant{n};
    if (n == "v3") return true;
    if (n == "auto") return v.automatic = true;
    if (n == "v3r") return v.rows = true;
    if (n == "p64") return (v.prefill = 64), v.rows = true;
    if (n == "p128") return (v.prefill = 128), v.rows = true;
    if (n == "pauto") return (v.prefill = -1), v.rows = true;
    if (n == "p64s") return (v.prefill = 64), (v.prefill_rb = 1), v.rows = true;
    if (n == "p128s") return (v.prefill = 128), (v.prefill_rb = 1), v.rows = true;
    if (n == "p64s2") return (v.prefill = 64), (v.prefill_rb = 1), (v.prefill_recs = 2), v.rows = true;
    v.sched = 1;
    if (n == "v4") return true;
    v.chunk = -1;
    if (n == "v5") return true;
    if (n == "v5r") return v.rows = true;
    if (n == "v5x") return (v.window = 1 << 20), true;
    if (n == "v5w") return (v.window = 8), true;
    if (n == "v5wr") return (v.window = 8), v.rows = true;
    if (n == "v5s") return (v.chunk = -2), (v.window = 3), true;
    if (n == "v5sr") return (v.chunk = -2), (v.window = 3), v.rows = true;
    return false;
}

std::vector<Variant> parse_variants(const std::string& list) {
    std::vector<Variant> out;
    size_t i = 0;
    while (i <= list.size()) {
        size_t j = list.find(',', i);
        if (j == std::string::npos) j = list.size();
        const std::string n = list.substr(i, j - i);
        if (!n.empty() && n != "none") {
            Variant v;
            if (!variant_by_name(n, v)) {
                std::fprintf(stderr, "unknown variant %s\n", n.c_str());
                std::exit(2);
            }
            out.push_back(v);
        }
        i = j + 1;
    }
    return out;
}

struct Launch {
    Variant var;
    DecodeKernel gate_up, down;
    harness::RoutingFn routing = nullptr;
    harness::CombineFn combine = nullptr;
    kiln::jit::moe::DecodeSplitRequest split_gu, split_dn;  // DecodeParams k_chunk / split_max_items
    int bm = 8;           // block_m of routing and both GEMMs
    int mblock_cap = 0;   // m-blocks the routing may emit (prefill grids are sized by it)
    bool prefill = false; // both GEMMs are the prefill kernel
};

// Waits for the device with a deadline: a kernel that never finishes (a pipeline deadlock) ends the
// process with status 4 instead of hanging the run.
void sync_or_die(const std::string& what, cudaStream_t s = 0, double seconds = 15.0) {
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaEventRecord(e, s));
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        const cudaError_t q = cudaEventQuery(e);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) CK(q);
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
            std::printf("HANG  %s: not finished after %.0f s\n", what.c_str(), seconds);
            std::fflush(stdout);
            std::_Exit(4);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    cudaEventDestroy(e);
}

// pauto: block_m 128 once an active expert's rows fill most of a 128-row m-block.
int prefill_block_m(const Variant& var, double rows_per_active) {
    if (var.prefill > 0) return var.prefill;
    return rows_per_active > 96.0 ? 128 : 64;
}

Launch prepare_launch(const DevWeights& gu, const DevWeights& dn, int act, int tiles, const Variant& var, int M,
                      int topk, int E, double rows_per_active = 0.0) {
    require_layout(gu.meta, W4Layout::decode_mma16, gu.meta.format, "decode gate_up");
    require_layout(dn.meta, W4Layout::decode_mma16, dn.meta.format, "decode down");
    Launch l;
    l.var = var;
    if (var.prefill) {
        l.prefill = true;
        l.bm = prefill_block_m(var, rows_per_active);
        l.mblock_cap = mblock_cap_for((long long)M * topk, E, l.bm);
        const bool mask = gu.meta.k % 64 != 0;
        const int recs_gu = gu.meta.k_pad % 128 == 0 ? var.prefill_recs : 1;
        const int recs_dn = dn.meta.k_pad % 128 == 0 ? var.prefill_recs : 1;
        l.gate_up = harness::select_prefill(fmt_code(gu.meta.format), gu.meta.wide_scales, 0, act, mask, l.bm / 8,
                                            var.prefill_rb, recs_gu);
        l.down = harness::select_prefill(fmt_code(dn.meta.format), dn.meta.wide_scales, 2, act, false, l.bm / 8,
                                         var.prefill_rb, recs_dn);
        l.routing = harness::select_routing(l.bm);
        l.combine = harness::select_combine();
        if (!l.gate_up.fn || !l.down.fn || !l.routing) {
            std::fprintf(stderr, "no prefill kernel for block_m=%d\n", l.bm);
            std::exit(2);
        }
        for (const DecodeKernel* k : {&l.gate_up, &l.down}) {
            CK(cudaFuncSetAttribute(k->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k->smem));
            CK(cudaFuncSetAttribute(k->fn, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        }
        CK(cudaFuncSetAttribute(l.routing, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 4 * 4096));
        static std::set<std::tuple<int, int, int, int>> reported;  // (block_m, format, rb, recs): once per process
        if (reported.insert({l.bm, fmt_code(gu.meta.format), var.prefill_rb, recs_gu}).second) {
            int occ_gu = 0, occ_dn = 0;
            cudaFuncAttributes a{};
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_gu, l.gate_up.fn, kiln_dev::moe::kPrefillThreads, l.gate_up.smem));
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_dn, l.down.fn, kiln_dev::moe::kPrefillThreads, l.down.smem));
            CK(cudaFuncGetAttributes(&a, l.gate_up.fn));
            std::printf("probe: prefill block_m %d format %d rb %d recs %d/%d: gate_up %d regs, %d B smem, %d weight stages, %d CTAs/SM; down %d CTAs/SM\n",
                        l.bm, fmt_code(gu.meta.format), var.prefill_rb, recs_gu, recs_dn, a.numRegs, l.gate_up.smem,
                        l.gate_up.stages, occ_gu, occ_dn);
        }
        return l;
    }
    l.bm = 8 * tiles;
    l.mblock_cap = mblock_cap_for((long long)M * topk, E, l.bm);
    int gu_sched = var.sched, dn_sched = var.sched;
    if (var.automatic) {  // mirrors MoeW4A16's automatic picks (INT4 gate_up dynamic below 4096 slots, ...)
        const long long slots = (long long)M * topk;
        gu_sched = gu.meta.format == W4Format::int4_g32_bf16 && slots < 4096 ? 1 : 0;
        dn_sched = 1;
        l.var.rows = slots >= 256;
        l.var.chunk = -1;
        l.var.window = 1;
    }
    const bool mask = gu.meta.k % 64 != 0;
    const int recs_gu = gu.meta.k_pad % 128 == 0 ? 2 : 1, recs_dn = dn.meta.k_pad % 128 == 0 ? 2 : 1;
    l.gate_up = harness::select_decode(fmt_code(gu.meta.format), gu.meta.wide_scales, gu_sched, 0, act, mask, recs_gu, tiles);
    l.down = harness::select_decode(fmt_code(dn.meta.format), dn.meta.wide_scales, dn_sched, l.var.rows ? 2 : 1, act,
                                    false, recs_dn, tiles);
    l.routing = harness::select_routing(8 * tiles);
    l.combine = harness::select_combine();
    if (!l.gate_up.fn || !l.down.fn || !l.routing) {
        std::fprintf(stderr, "no kernel for tiles=%d\n", tiles);
        std::exit(2);
    }
    CK(cudaFuncSetAttribute(l.gate_up.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, l.gate_up.smem));
    CK(cudaFuncSetAttribute(l.down.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, l.down.smem));
    CK(cudaFuncSetAttribute(l.routing, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 4 * 4096));
    const int groups = 4 * g_num_sms;
    using kiln::jit::moe::decode_split;
    const int gu_ipg = kiln::jit::moe::k_gate_up_items_per_group, dn_ipg = kiln::jit::moe::k_down_items_per_group;
    if (l.var.chunk == -1) {  // automatic (auto: down only, as the layer); the rows path never splits
        l.split_gu = decode_split(var.automatic ? 0 : -1, groups, gu_ipg);
        l.split_dn = l.var.rows ? decode_split(0, groups, dn_ipg) : decode_split(-1, groups, dn_ipg);
    } else if (var.chunk == -2) {
        l.split_gu = decode_split(recs_gu, groups, gu_ipg);
        l.split_dn = decode_split(recs_dn, groups, dn_ipg);
    } else {
        l.split_gu = decode_split(var.chunk, groups, gu_ipg);
        l.split_dn = decode_split(var.chunk, groups, dn_ipg);
    }
    return l;
}

void launch_routing(const Launch& l, Workspace& w, cudaStream_t s) {
    kiln_dev::moe::RoutingParams rp{};
    rp.topk_ids = w.ids;
    rp.topk_weights = w.wts;
    rp.expert_count = w.counts;
    rp.num_mblocks = w.nmb;
    rp.mblock_info = w.mblock_info;
    rp.sorted_token = w.sorted_token;
    rp.sorted_weight = w.sorted_weight;
    rp.num_tokens = w.M;
    rp.topk = w.topk;
    rp.num_experts = w.E;
    rp.mblock_cap = l.mblock_cap;
    rp.slot_pos = l.var.rows ? w.slot_pos : nullptr;
    l.routing<<<1, 1024, 2 * 4 * w.E, s>>>(rp);
    CK(cudaGetLastError());
}

void set_schedule(const Launch& l, Workspace& w, kiln_dev::moe::DecodeParams& p, bool down) {
    p.work = w.work + (down ? 2 : 0);
    p.split_acc = w.split_acc;
    p.split_cnt = w.split_cnt;
    p.split_cap = w.split_cap;
    const auto& split = down ? l.split_dn : l.split_gu;
    p.k_chunk = split.k_chunk;
    p.split_max_items = split.split_max_items;
    p.order_window = l.var.window;
}

void launch_gate_up(const Launch& l, Workspace& w, const DevWeights& gu, int copy, cudaStream_t s) {
    kiln_dev::moe::DecodeParams p{};
    p.weights = gu.d + size_t(copy) * gu.meta.expert_stride * gu.meta.experts;
    p.expert_stride = gu.meta.expert_stride;
    p.x = reinterpret_cast<const __nv_bfloat16*>(w.x);
    p.x_stride = w.H;
    p.k_real = gu.meta.k;
    p.k_pad = gu.meta.k_pad;
    p.n_pad = gu.meta.n_pad;
    p.n_real = gu.meta.n_pad;
    p.num_mblocks = w.nmb;
    p.mblock_info = w.mblock_info;
    p.sorted_token = w.sorted_token;
    p.sorted_weight = w.sorted_weight;
    p.num_tokens = w.M;
    p.inter = reinterpret_cast<__nv_bfloat16*>(w.inter);
    p.inter_stride = w.I_pad;
    set_schedule(l, w, p, false);
    if (l.prefill) {
        if (l.mblock_cap > 0)
            l.gate_up.fn<<<l.mblock_cap * (p.n_pad / 128), kiln_dev::moe::kPrefillThreads, l.gate_up.smem, s>>>(p);
    } else {
        l.gate_up.fn<<<g_num_sms, kiln_dev::moe::kDecodeThreads, l.gate_up.smem, s>>>(p);
    }
    CK(cudaGetLastError());
}

// down, and in the rows variants the combine launch after it
void launch_down(const Launch& l, Workspace& w, const DevWeights& dn, int copy, cudaStream_t s) {
    kiln_dev::moe::DecodeParams p{};
    p.weights = dn.d + size_t(copy) * dn.meta.expert_stride * dn.meta.experts;
    p.expert_stride = dn.meta.expert_stride;
    p.x = reinterpret_cast<const __nv_bfloat16*>(w.inter);
    p.x_stride = w.I_pad;
    p.k_real = dn.meta.k;
    p.k_pad = dn.meta.k_pad;
    p.n_pad = dn.meta.n_pad;
    p.n_real = dn.meta.n;
    p.num_mblocks = w.nmb;
    p.mblock_info = w.mblock_info;
    p.sorted_token = w.sorted_token;
    p.sorted_weight = w.sorted_weight;
    p.num_tokens = w.M;
    p.acc = w.acc;
    p.acc_stride = w.n_pad_down;
    if (l.var.rows) {
        p.out = reinterpret_cast<__nv_bfloat16*>(w.rows);
        p.out_stride = w.n_pad_down;
    } else {
        p.out = reinterpret_cast<__nv_bfloat16*>(w.out);
        p.out_stride = w.H;
    }
    p.counters = w.counters;
    set_schedule(l, w, p, true);
    if (l.prefill) {
        if (l.mblock_cap > 0)
            l.down.fn<<<l.mblock_cap * (p.n_pad / 128), kiln_dev::moe::kPrefillThreads, l.down.smem, s>>>(p);
    } else {
        l.down.fn<<<g_num_sms, kiln_dev::moe::kDecodeThreads, l.down.smem, s>>>(p);
    }
    CK(cudaGetLastError());
    if (l.var.rows && w.M > 0) {
        kiln_dev::moe::CombineParams c{};
        c.rows = reinterpret_cast<const __nv_bfloat16*>(w.rows);
        c.rows_stride = w.n_pad_down;
        c.slot_pos = w.slot_pos;
        c.num_tokens = w.M;
        c.topk = w.topk;
        c.n = dn.meta.n;
        c.out = reinterpret_cast<__nv_bfloat16*>(w.out);
        c.out_stride = w.H;
        const long long items = kiln_dev::moe::combine_items(w.M, dn.meta.n);
        l.combine<<<int(std::min<long long>(items, 16 * g_num_sms)), kiln_dev::moe::kCombineThreads, 0, s>>>(c);
        CK(cudaGetLastError());
    }
}

// ---------------------------------------------------------------------------------------------------
// CPU reference

float glu_ref(int act, float g, float u) {
    if (act == kiln_dev::moe::kActSiluGlu) return g / (1.0f + std::exp(-g)) * u;
    const float gs = 4.0f * std::tanh(g / 4.0f) / (1.0f + std::exp(-g));
    return gs * (25.0f * std::tanh(u / 25.0f));
}

// out [M, H] (double accumulation); inter_ref[(t, j)] = intermediate row of slot (t, j) when asked.
void reference_moe(const HostExperts& ex, const Routing& r, const std::vector<uint16_t>& x, int act,
                   std::vector<double>& out, std::map<std::pair<int, int>, std::vector<float>>* inter_ref) {
    const int H = ex.H, I = ex.I;
    out.assign(size_t(r.M) * H, 0.0);
    std::vector<std::vector<std::pair<int, int>>> rows(ex.E);  // (token, slot j)
    for (int t = 0; t < r.M; ++t)
        for (int j = 0; j < r.topk; ++j) {
            int e = r.ids[t * r.topk + j];
            if (e >= 0 && e < ex.E) rows[e].push_back({t, j});
        }
    std::vector<float> xf(x.size());
    for (size_t i = 0; i < x.size(); ++i) xf[i] = bf2f(x[i]);
    std::mutex mu;
    std::vector<int> active;
    for (int e = 0; e < ex.E; ++e)
        if (!rows[e].empty()) active.push_back(e);
    parallel_for(int(active.size()), [&](int ai) {
        const int e = active[ai];
        std::vector<float> wg, wu, wd;
        dequant_full(ex.fmt, ex.gate[e], I, H, wg);
        dequant_full(ex.fmt, ex.up[e], I, H, wu);
        dequant_full(ex.fmt, ex.down[e], H, I, wd);
        std::vector<std::pair<int, std::vector<double>>> contrib;
        std::vector<float> h(I);
        for (auto [t, j] : rows[e]) {
            const float* xt = &xf[size_t(t) * H];
            for (int i = 0; i < I; ++i) {
                double g = 0, u = 0;
                const float* a = &wg[size_t(i) * H];
                const float* b = &wu[size_t(i) * H];
                for (int k = 0; k < H; ++k) {
                    g += double(a[k]) * xt[k];
                    u += double(b[k]) * xt[k];
                }
                h[i] = glu_ref(act, float(g), float(u));
            }
            const double wt = r.weights[t * r.topk + j];
            std::vector<double> y(H);
            for (int n = 0; n < H; ++n) {
                double acc = 0;
                const float* d = &wd[size_t(n) * I];
                for (int i = 0; i < I; ++i) acc += double(d[i]) * h[i];
                y[n] = wt * acc;
            }
            std::lock_guard<std::mutex> lock(mu);
            for (int n = 0; n < H; ++n) out[size_t(t) * H + n] += y[n];
            if (inter_ref) (*inter_ref)[{t, j}] = h;
        }
    });
}

// ---------------------------------------------------------------------------------------------------
// Tests

void report(bool ok, const std::string& what) {
    std::printf("%s  %s\n", ok ? "PASS" : "FAIL", what.c_str());
    std::fflush(stdout);
    if (!ok) ++g_failures;
}

void test_dequant() {
    struct C {
        W4Format f;
        bool gate_up, wide;
        int n, k;
    };
    const C cases[] = {
        {W4Format::int4_g32_bf16, false, false, 128, 256},   {W4Format::int4_g32_bf16, true, false, 96, 224},
        {W4Format::mxfp4_g32_e8m0, false, false, 128, 256},  {W4Format::mxfp4_g32_e8m0, true, false, 40, 160},
        {W4Format::mxfp4_g32_e8m0, false, true, 64, 128},
    };
    int ci = 0;
    for (const C& c : cases) {
        ++ci;
        const int parts = c.gate_up ? 2 : 1;
        std::vector<HostMatrix> m;
        for (int p = 0; p < parts; ++p) m.push_back(random_matrix(c.f, c.n, c.k, 77 + ci * 7 + p, c.wide));
        std::mt19937 srng(ci);
        if (c.f == W4Format::mxfp4_g32_e8m0) {
            // exercise every scale byte the kernel path supports, extremes included
            for (auto& mm : m)
                for (size_t i = 0; i < mm.scale.size(); ++i)
                    mm.scale[i] = std::byte(c.wide ? srng() % 255 : srng() % 129);
        } else {
            // any finite bf16 scale, subnormals and huge values included
            for (auto& mm : m)
                for (size_t i = 0; i + 1 < mm.scale.size(); i += 2) {
                    uint16_t b;
                    do b = static_cast<uint16_t>(srng()); while ((b & 0x7F80) == 0x7F80);
                    std::memcpy(mm.scale.data() + i, &b, 2);
                }
        }
        PreparedMoeWeights w = prepare_moe_weights(c.f, W4Layout::decode_mma16, c.gate_up, 1, c.n, c.k,
                                                   [&](int, int p) { return m[p].view(); });
        if (w.wide_scales != c.wide) {
            report(false, "dequant: wide-scale detection");
            continue;
        }
        std::vector<float> logical(size_t(parts) * c.n * c.k);
        dequantize_prepared(w, 0, logical);
        DevWeights dw = upload(w);
        uint16_t* d_out;
        const size_t elems = size_t(dw.meta.n_pad) * dw.meta.k_pad;
        CK(cudaMalloc(&d_out, elems * 2));
        CK(cudaMemset(d_out, 0xFF, elems * 2));
        kiln_dev::moe::DequantParams p{dw.d, reinterpret_cast<__nv_bfloat16*>(d_out), dw.meta.n_pad, dw.meta.k_pad};
        harness::select_dequant(fmt_code(c.f), c.wide)<<<64, 256>>>(p);
        CK(cudaGetLastError());
        std::vector<uint16_t> got(elems);
        CK(cudaMemcpy(got.data(), d_out, elems * 2, cudaMemcpyDeviceToHost));
        cudaFree(d_out);
        cudaFree(dw.d);
        long bad = 0, pad_bad = 0;
        for (int r = 0; r < dw.meta.n_pad; ++r) {
            int part = 0, row = r;
            bool pad;
            if (c.gate_up) {
                const int blk = r / 16, j = r % 16, i = blk * 8 + j % 8;
                part = j / 8;
                row = i;
                pad = i >= c.n;
            } else {
                pad = r >= c.n;
            }
            for (int k = 0; k < dw.meta.k_pad; ++k) {
                const uint16_t g = got[size_t(r) * dw.meta.k_pad + k];
                if (pad || k >= c.k) {
                    if (bf2f(g) != 0.0f) ++pad_bad;
                    continue;
                }
                const uint16_t want = f2bf(logical[(size_t(part) * c.n + row) * c.k + k]);
                if (g != want && !(bf2f(g) == 0.0f && bf2f(want) == 0.0f)) {
                    if (bad < 3)
                        std::printf("   mismatch row %d k %d: got %04x want %04x (%g)\n", r, k, g, want,
                                    double(logical[(size_t(part) * c.n + row) * c.k + k]));
                    ++bad;
                }
            }
        }
        char buf[256];
        std::snprintf(buf, sizeof buf, "dequant %s%s%s [%d, %d]: fused == unfused bf16 (%ld mismatches, %ld padding)",
                      std::string(to_string(c.f)).c_str(), c.gate_up ? " gate_up" : "", c.wide ? " wide" : "", c.n,
                      c.k, bad, pad_bad);
        report(bad == 0 && pad_bad == 0, buf);
    }
}

void test_routing() {
    struct C {
        std::string kind;
        int M, topk, E, bm;
    };
    const C cases[] = {{"uniform", 1, 8, 48, 8},     {"uniform", 37, 8, 48, 8},   {"skewed", 300, 8, 64, 16},
                       {"hot", 128, 4, 16, 32},       {"half_empty", 77, 6, 40, 8}, {"uniform", 16384, 8, 384, 32},
                       {"uniform", 5, 16, 896, 8}};
    for (const C& c : cases) {
        Routing r = make_routing(c.kind, c.M, c.topk, c.E, 1234 + c.M);
        if (c.kind == "uniform" && c.M == 37)
            for (size_t i = 0; i < r.ids.size(); i += 5) r.ids[i] = -1;  // EP: some slots not local
        int32_t *ids, *counts, *nmb, *stok;
        float *wts, *swt;
        int2* info;
        const long long slots = (long long)c.M * c.topk;
        const int cap = int(slots / c.bm + std::min<long long>(c.E, slots) + 1);
        CK(cudaMalloc(&ids, slots * 4));
        CK(cudaMalloc(&wts, slots * 4));
        CK(cudaMalloc(&counts, c.E * 4));
        CK(cudaMalloc(&nmb, 4));
        CK(cudaMalloc(&info, cap * sizeof(int2)));
        CK(cudaMalloc(&stok, size_t(cap) * c.bm * 4));
        CK(cudaMalloc(&swt, size_t(cap) * c.bm * 4));
        CK(cudaMemset(stok, 0x7F, size_t(cap) * c.bm * 4));
        CK(cudaMemcpy(ids, r.ids.data(), slots * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(wts, r.weights.data(), slots * 4, cudaMemcpyHostToDevice));
        int32_t* spos;
        CK(cudaMalloc(&spos, slots * 4));
        CK(cudaMemset(spos, 0x7F, slots * 4));
        kiln_dev::moe::RoutingParams rp{ids, wts, counts, nmb, info, stok, swt, c.M, c.topk, c.E, cap, spos};
        auto fn = harness::select_routing(c.bm);
        CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 4 * 4096));
        fn<<<1, 1024, 2 * 4 * c.E>>>(rp);
        CK(cudaGetLastError());
        int h_nmb;
        CK(cudaMemcpy(&h_nmb, nmb, 4, cudaMemcpyDeviceToHost));
        std::vector<int32_t> h_counts(c.E);
        CK(cudaMemcpy(h_counts.data(), counts, c.E * 4, cudaMemcpyDeviceToHost));
        std::vector<int2> h_info(std::max(1, h_nmb));
        std::vector<int32_t> h_tok(size_t(std::max(1, h_nmb)) * c.bm);
        std::vector<float> h_wt(h_tok.size());
        if (h_nmb > 0) {
            CK(cudaMemcpy(h_info.data(), info, h_nmb * sizeof(int2), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h_tok.data(), stok, h_tok.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h_wt.data(), swt, h_wt.size() * 4, cudaMemcpyDeviceToHost));
        }
        std::vector<int32_t> h_pos(slots);
        CK(cudaMemcpy(h_pos.data(), spos, slots * 4, cudaMemcpyDeviceToHost));
        cudaFree(ids); cudaFree(wts); cudaFree(counts); cudaFree(nmb); cudaFree(info); cudaFree(stok); cudaFree(swt);
        cudaFree(spos);
        // expected
        const std::vector<int> want_counts = expert_counts(r);
        int want_nmb = 0;
        for (int v : want_counts) want_nmb += (v + c.bm - 1) / c.bm;
        bool ok = h_nmb == want_nmb && std::vector<int>(h_counts.begin(), h_counts.end()) == want_counts;
        // multiset of (expert, token, weight) over valid rows == routing; padding is -1 / 0
        std::multiset<std::tuple<int, int, float>> want, got;
        for (int t = 0; t < c.M; ++t)
            for (int j = 0; j < c.topk; ++j) {
                int e = r.ids[t * c.topk + j];
                if (e >= 0 && e < c.E) want.insert({e, t, r.weights[t * c.topk + j]});
            }
        std::vector<int> seen_blocks(c.E, 0);
        int prev_e = -1;
        for (int b = 0; ok && b < h_nmb; ++b) {
            const int e = h_info[b].x, valid = h_info[b].y;
            if (e < 0 || e >= c.E || valid < 1 || valid > c.bm) { ok = false; break; }
            if (e < prev_e) ok = false;  // experts in order
            prev_e = e;
            ++seen_blocks[e];
            for (int rr = 0; rr < c.bm; ++rr) {
                const int tok = h_tok[size_t(b) * c.bm + rr];
                if (rr < valid) {
                    if (tok < 0 || tok >= c.M) ok = false;
                    else got.insert({e, tok, h_wt[size_t(b) * c.bm + rr]});
                } else if (tok != -1 || h_wt[size_t(b) * c.bm + rr] != 0.0f) {
                    ok = false;
                }
            }
        }
        ok = ok && got == want;
        // slot_pos: every local slot names a distinct row holding its token and weight; others are -1
        std::set<int> used;
        for (long long sl = 0; ok && sl < slots; ++sl) {
            const int e = r.ids[sl], pos = h_pos[sl];
            if (e < 0 || e >= c.E) {
                ok = pos == -1;
                continue;
            }
            ok = pos >= 0 && pos < h_nmb * c.bm && used.insert(pos).second && h_tok[pos] == int(sl / c.topk) &&
                 h_wt[pos] == r.weights[sl] && h_info[pos / c.bm].x == e;
        }
        char buf[200];
        std::snprintf(buf, sizeof buf, "routing %s M=%d topk=%d E=%d bm=%d (%d m-blocks)", c.kind.c_str(), c.M, c.topk,
                      c.E, c.bm, h_nmb);
        report(ok, buf);
    }
}

struct MoeCase {
    std::string name;
    W4Format fmt;
    int act;
    int H, I, E, topk, M;
    std::string routing;  // or "ep" (then M = B global tokens)
    int tiles;
    bool wide = false;
};

double rel_error(const std::vector<uint16_t>& got, const std::vector<double>& ref, long* nan_count) {
    double num = 0, den = 0;
    long nans = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const float g = bf2f(got[i]);
        if (!std::isfinite(g)) {
            ++nans;
            continue;
        }
        num += (g - ref[i]) * (g - ref[i]);
        den += ref[i] * ref[i];
    }
    *nan_count = nans;
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<Variant> g_test_variants;
std::map<std::string, int> g_variant_failures;

void run_moe_case(const MoeCase& c) {
    const std::vector<Variant>& variants = g_test_variants;
    const uint64_t seed = std::hash<std::string>{}(c.name) & 0xFFFFFF;
    HostExperts ex = random_experts(c.fmt, c.E, c.H, c.I, seed);
    if (c.wide)
        for (auto* v : {&ex.gate, &ex.up, &ex.down})
            for (auto& m : *v) m.scale[0] = std::byte(131);  // one wide scale: forces the two-multiply path
    Routing r = c.routing == "ep"        ? make_ep_routing(c.M, c.topk, c.E, 8, seed + 1)
                : c.routing == "ep_full" ? make_ep_routing(c.M, c.topk, c.E, 8, seed + 1, false)
                                         : make_routing(c.routing, c.M, c.topk, c.E, seed + 1);
    PreparedMoeWeights wgu = prepare_moe_weights(c.fmt, W4Layout::decode_mma16, true, c.E, c.I, c.H, [&](int e, int part) {
        return part == 0 ? ex.gate[e].view() : ex.up[e].view();
    });
    PreparedMoeWeights wdn = prepare_moe_weights(c.fmt, W4Layout::decode_mma16, false, c.E, c.H, c.I,
                                                 [&](int e, int) { return ex.down[e].view(); });
    DevWeights gu = upload(std::move(wgu)), dn = upload(std::move(wdn));
    Workspace ws = make_workspace(r.M, r.topk, c.E, c.tiles, c.H, gu, dn);
    upload_routing(ws, r);
    std::vector<uint16_t> x(size_t(r.M) * c.H);
    std::mt19937_64 rng(seed + 2);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = f2bf(nd(rng));
    if (r.M > 0) CK(cudaMemcpy(ws.x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));

    std::vector<double> ref;
    std::map<std::pair<int, int>, std::vector<float>> inter_ref;
    const bool small = (long long)c.H * c.I <= 1 << 20;
    reference_moe(ex, r, x, c.act, ref, small ? &inter_ref : nullptr);
    double rows_per_active = 0.0;
    {
        int active = 0, routed = 0;
        for (int v : expert_counts(r)) active += v > 0, routed += v;
        rows_per_active = active ? double(routed) / active : 0.0;
    }

    for (const Variant& var : variants) {
        Launch l = prepare_launch(gu, dn, c.act, c.tiles, var, r.M, r.topk, c.E, rows_per_active);
        reset_call_state(ws);
        for (int rep = 0; rep < 2; ++rep) {
            CK(cudaMemset(ws.out, 0xFF, std::max<size_t>(1, size_t(r.M)) * c.H * 2));
            CK(cudaMemset(ws.inter, 0xFF, ws.row_cap * ws.I_pad * 2));
            CK(cudaMemset(ws.rows, 0xFF, ws.row_cap * ws.n_pad_down * 2));
            launch_routing(l, ws, 0);
            launch_gate_up(l, ws, gu, 0, 0);
            launch_down(l, ws, dn, 0, 0);
            sync_or_die(var.name + " " + c.name);
            std::vector<uint16_t> got(size_t(r.M) * c.H);
            if (r.M > 0) CK(cudaMemcpy(got.data(), ws.out, got.size() * 2, cudaMemcpyDeviceToHost));
            long nans = 0;
            const double err = rel_error(got, ref, &nans);
            // intermediate check (small shapes): GPU row p holds slot (token, expert of its m-block)
            double ierr = 0;
            if (small && rep == 0 && r.M > 0) {
                int h_nmb;
                CK(cudaMemcpy(&h_nmb, ws.nmb, 4, cudaMemcpyDeviceToHost));
                std::vector<int2> info(std::max(1, h_nmb));
                std::vector<int32_t> tok(size_t(std::max(1, h_nmb)) * l.bm);
                std::vector<uint16_t> inter(size_t(std::max(1, h_nmb)) * l.bm * ws.I_pad);
                if (h_nmb > 0) {
                    CK(cudaMemcpy(info.data(), ws.mblock_info, h_nmb * sizeof(int2), cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(tok.data(), ws.sorted_token, tok.size() * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(inter.data(), ws.inter, inter.size() * 2, cudaMemcpyDeviceToHost));
                }
                double num = 0, den = 0;
                for (int b = 0; b < h_nmb; ++b)
                    for (int rr = 0; rr < info[b].y; ++rr) {
                        const int t = tok[size_t(b) * l.bm + rr];
                        int j = -1;
                        for (int jj = 0; jj < r.topk; ++jj)
                            if (r.ids[t * r.topk + jj] == info[b].x) j = jj;
                        auto it = inter_ref.find({t, j});
                        if (it == inter_ref.end()) { num += 1e30; continue; }
                        for (int i = 0; i < c.I; ++i) {
                            const double g = bf2f(inter[(size_t(b) * l.bm + rr) * ws.I_pad + i]);
                            num += (g - it->second[i]) * (g - it->second[i]);
                            den += double(it->second[i]) * it->second[i];
                        }
                    }
                ierr = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
            }
            char buf[360];
            std::snprintf(buf, sizeof buf, "moe %-5s %-28s %s M=%d E=%d topk=%d H=%d I=%d tiles=%d run %d: rel err %.2e%s, NaN %ld",
                          var.name.c_str(), c.name.c_str(), std::string(to_string(c.fmt)).c_str(), r.M, c.E, c.topk, c.H,
                          c.I, l.prefill ? l.bm / 8 : c.tiles, rep, err,
                          (small && rep == 0) ? (" (intermediate " + std::to_string(ierr).substr(0, 8) + ")").c_str() : "",
                          nans);
            const bool ok = nans == 0 && err <= 1e-2 && (!small || rep > 0 || ierr <= 1e-2);
            report(ok, buf);
            if (!ok) g_variant_failures[var.name]++;
        }
    }
    free_workspace(ws);
    cudaFree(gu.d);
    cudaFree(dn.d);
}

void test_moe_small() {
    using F = W4Format;
    const int silu = kiln_dev::moe::kActSiluGlu, situ = kiln_dev::moe::kActSituGlu;
    const std::vector<MoeCase> cases = {
        {"int4 silu uniform", F::int4_g32_bf16, silu, 256, 128, 16, 4, 40, "uniform", 1},
        {"mxfp4 situ uniform", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 40, "uniform", 1},
        {"int4 situ tiles2", F::int4_g32_bf16, situ, 256, 128, 16, 4, 40, "uniform", 2},
        {"mxfp4 silu tiles4", F::mxfp4_g32_e8m0, silu, 256, 128, 16, 4, 40, "uniform", 4},
        {"int4 M=1", F::int4_g32_bf16, silu, 256, 128, 16, 4, 1, "uniform", 1},
        {"mxfp4 M=1 topk16", F::mxfp4_g32_e8m0, situ, 256, 192, 64, 16, 1, "uniform", 1},
        {"int4 skewed", F::int4_g32_bf16, silu, 256, 128, 32, 8, 200, "skewed", 2},
        {"mxfp4 hot expert", F::mxfp4_g32_e8m0, situ, 256, 128, 16, 4, 150, "hot", 1},
        {"int4 hot expert tiles4", F::int4_g32_bf16, silu, 256, 128, 16, 4, 150, "hot", 4},
        {"int4 half experts empty", F::int4_g32_bf16, silu, 256, 128, 32, 4, 60, "half_empty", 1},
        {"int4 odd sizes", F::int4_g32_bf16, silu, 224, 96, 5, 2, 33, "uniform", 1},
        {"mxfp4 odd sizes", F::mxfp4_g32_e8m0, situ, 160, 160, 7, 3, 21, "uniform", 2},
        {"int4 odd K 96", F::int4_g32_bf16, silu, 96, 96, 6, 2, 19, "uniform", 1},
        {"mxfp4 wide scales", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 2, 17, "uniform", 1, true},
        {"int4 ep (tokens w/o experts)", F::int4_g32_bf16, silu, 256, 128, 8, 4, 64, "ep_full", 1},
        {"mxfp4 no local expert at all", F::mxfp4_g32_e8m0, situ, 256, 128, 8, 4, 3, "none", 1},
        {"int4 M=4096", F::int4_g32_bf16, silu, 256, 128, 64, 8, 4096, "uniform", 4},
        {"mxfp4 M=16384", F::mxfp4_g32_e8m0, situ, 128, 64, 32, 4, 16384, "uniform", 4},
        {"int4 prefill odd K 2048", F::int4_g32_bf16, silu, 352, 160, 12, 4, 2048, "skewed", 4},
        {"mxfp4 prefill 8192", F::mxfp4_g32_e8m0, situ, 256, 96, 24, 6, 8192, "uniform", 4},
        {"int4 hot expert tiles2", F::int4_g32_bf16, situ, 192, 320, 9, 3, 300, "hot", 2},
        // prefill sizes: several m-blocks per expert, partly filled last blocks, odd shapes
        {"int4 prefill hot 4096 odd", F::int4_g32_bf16, silu, 224, 320, 16, 6, 4096, "hot", 4},
        {"int4 prefill ep -1 slots 2048", F::int4_g32_bf16, situ, 256, 160, 48, 8, 2048, "ep_full", 4},
        {"mxfp4 prefill wide 2048", F::mxfp4_g32_e8m0, situ, 224, 160, 12, 4, 2048, "uniform", 4, true},
        {"int4 prefill half empty 8192", F::int4_g32_bf16, situ, 160, 96, 32, 4, 8192, "half_empty", 4},
        {"mxfp4 prefill skewed 16384 K352", F::mxfp4_g32_e8m0, silu, 352, 64, 64, 4, 16384, "skewed", 4},
    };
    for (const auto& c : cases) run_moe_case(c);
}

void test_moe_real() {
    using F = W4Format;
    const int silu = kiln_dev::moe::kActSiluGlu, situ = kiln_dev::moe::kActSituGlu;
    const std::vector<MoeCase> cases = {
        {"K2 EP8 decode 20/GPU", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, 24, "ep", 1},
        {"K2 EP8 decode tiles2", F::int4_g32_bf16, silu, 7168, 2048, 12, 8, 40, "ep", 2},
        {"K2 TP8 slice", F::int4_g32_bf16, silu, 7168, 256, 64, 8, 48, "uniform", 4},
        {"K3 EP8 decode B=8", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, 8, "ep", 1},
        {"K3 TP8 slice", F::mxfp4_g32_e8m0, situ, 3584, 384, 64, 16, 24, "uniform", 1},
        {"K2 TP8 slice prefill", F::int4_g32_bf16, silu, 7168, 256, 64, 8, 256, "uniform", 4},
        {"K2 EP8 prefill shape", F::int4_g32_bf16, silu, 7168, 2048, 12, 8, 512, "ep", 4},
        {"K3 TP8 slice prefill", F::mxfp4_g32_e8m0, situ, 3584, 384, 64, 16, 256, "uniform", 4},
    };
    for (const auto& c : cases) run_moe_case(c);
}

// ---------------------------------------------------------------------------------------------------
// Benchmarks

__global__ void fill_random_kernel(uint32_t* p, size_t n_words, uint64_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += size_t(gridDim.x) * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[i] = uint32_t(z ^ (z >> 31));
    }
}

// Scales in every record: INT4 bf16 in [0.004, 0.012), MXFP4 bytes in [117, 121].
__global__ void fix_scales_kernel(uint8_t* base, size_t records, int rec_bytes, int scale_off, int scale_bytes, int int4) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < records * scale_bytes; i += size_t(gridDim.x) * blockDim.x) {
        const size_t r = i / scale_bytes, b = i % scale_bytes;
        uint8_t* p = base + r * rec_bytes + scale_off + b;
        if (int4) {
            if (b % 2 == 1) continue;
            const uint32_t h = uint32_t(i * 2654435761u);
            const float v = 0.004f + 0.008f * float(h >> 8) / 16777216.0f;
            uint32_t u = __float_as_uint(v);
            const uint16_t bf = uint16_t(u >> 16);
            p[0] = uint8_t(bf & 0xFF);
            p[1] = uint8_t(bf >> 8);
        } else {
            p[0] = uint8_t(117 + (uint32_t(i * 2654435761u) >> 29) % 5);
        }
    }
}

DevWeights random_device_weights(W4Format fmt, bool gate_up, int E, int n, int k, int copies, uint64_t seed) {
    // Shape metadata from a one-expert preparation of zero matrices (cheap), then random bytes.
    HostMatrix z;
    z.packed.assign(fmt == W4Format::int4_g32_bf16 ? size_t(n) * (k / 8) * 4 : size_t(n) * (k / 2), std::byte{0});
    z.scale.assign(size_t(n) * (k / 32) * (fmt == W4Format::int4_g32_bf16 ? 2 : 1), std::byte{0});
    PreparedMoeWeights meta = prepare_moe_weights(fmt, W4Layout::decode_mma16, gate_up, 1, n, k, [&](int, int) { return z.view(); });
    meta.bytes.clear();
    meta.experts = E;
    DevWeights d;
    const size_t bytes = meta.expert_stride * E * copies;
    CK(cudaMalloc(&d.d, bytes));
    fill_random_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(d.d), bytes / 4, seed);
    const int rec = layout_record_bytes(fmt, W4Layout::decode_mma16);
    fix_scales_kernel<<<1024, 256>>>(d.d, bytes / rec, rec, 8 * 512, 8 * layout_scale_bytes_per_block(fmt),
                                     fmt == W4Format::int4_g32_bf16);
    CK(cudaGetLastError());
    d.meta = std::move(meta);
    d.copies = copies;
    return d;
}

__global__ void read_probe_kernel(const uint4* __restrict__ p, size_t n, uint32_t* out) {
    uint32_t acc = 0;
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

void read_probe() {
    const size_t bytes = size_t(4) << 30;
    uint8_t* buf;
    uint32_t* out;
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMalloc(&out, 4096 * 4));
    fill_random_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(buf), bytes / 4, 7);
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int cfg = 0; cfg < 2; ++cfg) {
        const int blocks = g_num_sms * (cfg == 0 ? 4 : 8), threads = cfg == 0 ? 512 : 256;
        std::vector<double> t;
        for (int it = 0; it < 8; ++it) {
            CK(cudaEventRecord(a));
            read_probe_kernel<<<blocks, threads>>>(reinterpret_cast<const uint4*>(buf), bytes / 16, out);
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        std::printf("probe: read-only LDG.128 %d x %d: %.2f TB/s\n", blocks, threads, bytes / (t[t.size() / 2] * 1e-3) / 1e12);
    }
    std::vector<double> t;
    uint8_t* dst;
    CK(cudaMalloc(&dst, bytes / 2));
    for (int it = 0; it < 6; ++it) {
        CK(cudaEventRecord(a));
        CK(cudaMemcpyAsync(dst, buf, bytes / 2, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    std::printf("probe: device copy (read + write): %.2f TB/s\n", bytes / (t[t.size() / 2] * 1e-3) / 1e12);
    cudaFree(dst);
    cudaFree(buf);
    cudaFree(out);
}

struct Scenario {
    std::string name;
    W4Format fmt;
    int act;
    int H, I, E, topk;
    std::string routing;  // "ep" (B global tokens over 8 ranks), "uniform", "balanced"
    int tokens;
    int tiles;
    bool decode;  // decode goal applies
};

std::vector<Scenario> scenarios() {
    using F = W4Format;
    const int silu = kiln_dev::moe::kActSiluGlu, situ = kiln_dev::moe::kActSituGlu;
    return {
        {"k2_ep8_decode_20", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 160, 1, true},
        {"k2_ep8_decode_50", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 400, 2, true},
        {"k2_grouped_decode_8", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "balanced", 48, 1, true},
        {"k3_ep8_decode_1", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 1, 1, true},
        {"k3_ep8_decode_8", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 8, 1, true},
        {"k3_ep8_decode_32", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 32, 1, true},
        {"k3_ep8_decode_128", F::mxfp4_g32_e8m0, situ, 3584, 3072, 112, 16, "ep", 128, 1, true},
        // prefill last: a run short of time still has every decode row
        {"k2_ep8_prefill_2048", F::int4_g32_bf16, silu, 7168, 2048, 48, 8, "ep", 2048, 4, false},
        {"k2_tp8_8192", F::int4_g32_bf16, silu, 7168, 256, 384, 8, "uniform", 8192, 4, false},
    };
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

void bench(const std::string& routing_dir, const std::string& json_path, const std::string& only, int iters, bool probe_math,
           const std::vector<Variant>& decode_variants, const std::vector<Variant>& prefill_variants) {
    std::string json = "[\n";
    bool first = true;
    for (const Scenario& sc : scenarios()) {
        if (!only.empty()) {  // comma-separated substrings of scenario names
            bool hit = false;
            for (size_t i = 0; i <= only.size();) {
                size_t j = only.find(',', i);
                if (j == std::string::npos) j = only.size();
                if (j > i && sc.name.find(only.substr(i, j - i)) != std::string::npos) hit = true;
                i = j + 1;
            }
            if (!hit) continue;
        }
        std::vector<Variant> variants = sc.decode ? decode_variants : prefill_variants;
        const uint64_t seed = std::hash<std::string>{}(sc.name) & 0xFFFFFF;
        Routing r = sc.routing == "ep" ? make_ep_routing(sc.tokens, sc.topk, sc.E, 8, seed)
                                       : make_routing(sc.routing, sc.tokens, sc.topk, sc.E, seed);
        const std::vector<int> cnt = expert_counts(r);
        int active = 0, rows = 0, maxrows = 0;
        for (int v : cnt) {
            active += v > 0;
            rows += v;
            maxrows = std::max(maxrows, v);
        }
        const double rows_per_active = active ? double(rows) / active : 0.0;
        if (sc.decode && rows_per_active >= 8.0)  // for information: the prefill GEMM where m-blocks fill
            for (const Variant& v : prefill_variants)
                if (v.prefill) variants.push_back(v);
        if (variants.empty()) continue;
        if (!routing_dir.empty()) {  // written first: the baseline runner reads it
            const std::string base = routing_dir + "/" + sc.name;
            std::ofstream f(base + ".ids", std::ios::binary);
            f.write(reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * 4);
            std::ofstream fw(base + ".weights", std::ios::binary);
            fw.write(reinterpret_cast<const char*>(r.weights.data()), r.weights.size() * 4);
            std::ofstream fj(base + ".json");
            fj << "{\"name\": \"" << sc.name << "\", \"format\": \"" << to_string(sc.fmt) << "\", \"act\": "
               << sc.act << ", \"M\": " << r.M << ", \"topk\": " << r.topk << ", \"E\": " << sc.E << ", \"H\": " << sc.H
               << ", \"I\": " << sc.I << "}\n";
        }
        // rotation copies so that the touched weights of consecutive iterations are not L2-resident
        DevWeights gu0 = random_device_weights(sc.fmt, true, sc.E, sc.I, sc.H, 1, seed * 3 + 1);
        const size_t set_bytes = (gu0.meta.expert_stride) * sc.E;
        cudaFree(gu0.d);
        const double touched_per_copy = double(active) * 1.5 * double(set_bytes) / sc.E;
        int copies = int(std::ceil(2.0e9 / std::max(1.0, touched_per_copy)));
        copies = std::max(2, std::min(copies, 12));
        DevWeights gu = random_device_weights(sc.fmt, true, sc.E, sc.I, sc.H, copies, seed * 3 + 1);
        DevWeights dn = random_device_weights(sc.fmt, false, sc.E, sc.H, sc.I, copies, seed * 3 + 2);
        Workspace ws = make_workspace(r.M, r.topk, sc.E, sc.tiles, sc.H, gu, dn);
        upload_routing(ws, r);
        {
            std::vector<uint16_t> x(size_t(r.M) * sc.H);
            std::mt19937_64 rng(seed);
            std::normal_distribution<float> nd(0.f, 1.f);
            for (auto& v : x) v = f2bf(nd(rng));
            CK(cudaMemcpy(ws.x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        }
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        // bytes: touched experts' packed weights + scales, activations in and out of both GEMMs
        const double wbytes = double(active) * double(gu.meta.expert_stride + dn.meta.expert_stride);
        const double abytes = double(r.M) * sc.H * 2 * 2 + double(rows) * sc.I * 2 * 2;
        const double bytes = wbytes + abytes;
        const double floor_us = bytes / 4.8e12 * 1e6;
        const double flops = 2.0 * rows * (2.0 * sc.I * sc.H + double(sc.H) * sc.I);
        for (const Variant& var : variants) {
            Launch l = prepare_launch(gu, dn, sc.act, sc.tiles, var, r.M, r.topk, sc.E, rows_per_active);
            reset_call_state(ws);
            for (int it = 0; it < 3; ++it) {
                launch_routing(l, ws, s);
                launch_gate_up(l, ws, gu, it % copies, s);
                launch_down(l, ws, dn, it % copies, s);
            }
            sync_or_die("bench warm-up " + sc.name + " " + var.name, s, 20.0);
            const int n = iters;
            std::vector<cudaEvent_t> ev(4 * n);
            for (auto& e : ev) CK(cudaEventCreate(&e));
            for (int it = 0; it < n; ++it) {
                const int cp = it % copies;
                CK(cudaEventRecord(ev[4 * it + 0], s));
                launch_routing(l, ws, s);
                CK(cudaEventRecord(ev[4 * it + 1], s));
                launch_gate_up(l, ws, gu, cp, s);
                CK(cudaEventRecord(ev[4 * it + 2], s));
                launch_down(l, ws, dn, cp, s);
                CK(cudaEventRecord(ev[4 * it + 3], s));
            }
            sync_or_die("bench " + sc.name + " " + var.name, s, 30.0);
            std::vector<double> tt, tr, tg, td;
            for (int it = 0; it < n; ++it) {
                float a, b, c, d;
                CK(cudaEventElapsedTime(&a, ev[4 * it], ev[4 * it + 3]));
                CK(cudaEventElapsedTime(&b, ev[4 * it], ev[4 * it + 1]));
                CK(cudaEventElapsedTime(&c, ev[4 * it + 1], ev[4 * it + 2]));
                CK(cudaEventElapsedTime(&d, ev[4 * it + 2], ev[4 * it + 3]));
                tt.push_back(a * 1e3);
                tr.push_back(b * 1e3);
                tg.push_back(c * 1e3);
                td.push_back(d * 1e3);
            }
            for (auto& e : ev) cudaEventDestroy(e);
            if (probe_math && sc.tiles == 1 && sc.fmt == W4Format::int4_g32_bf16 && !var.rows && !var.automatic) {
                // the gate_up pipeline alone (same bytes, no dequantisation / MMA)
                Launch lp = l;
                lp.gate_up = harness::select_decode_skip_math(var.sched);
                CK(cudaFuncSetAttribute(lp.gate_up.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, lp.gate_up.smem));
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                std::vector<double> tp;
                for (int it = 0; it < 20; ++it) {
                    CK(cudaEventRecord(e0, s));
                    launch_gate_up(lp, ws, gu, it % copies, s);
                    CK(cudaEventRecord(e1, s));
                    sync_or_die("probe " + sc.name + " " + var.name, s, 10.0);
                    float ms;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    tp.push_back(ms * 1e3);
                }
                const double gub = double(active) * gu.meta.expert_stride;
                std::printf("probe: %s %s gate_up pipeline without math: %.1f us = %.2f TB/s (with math %.1f us = %.2f TB/s)\n",
                            sc.name.c_str(), var.name.c_str(), median(tp), gub / median(tp) / 1e6, median(tg),
                            gub / median(tg) / 1e6);
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
            }
            const double us = median(tt);
            char line[480];
            std::snprintf(line, sizeof line,
                          "%-22s %-5s M=%5d rows=%6d active=%4d rows/E=%6.2f max=%4d | total %8.1f us (route %5.1f, gate_up %8.1f, "
                          "down %8.1f) | %8.1f MB %5.2f TB/s %5.1f%% of 4.8 floor(%7.1f us) | %6.1f TFLOP/s | chunk %d/%d | block_m %d%s",
                          sc.name.c_str(), var.name.c_str(), r.M, rows, active, active ? double(rows) / active : 0.0, maxrows,
                          us, median(tr), median(tg), median(td), bytes / 1e6, bytes / us / 1e6, 100.0 * floor_us / us,
                          floor_us, flops / us / 1e6, l.split_gu.k_chunk, l.split_dn.k_chunk, l.bm, l.prefill ? " prefill" : "");
            std::printf("%s\n", line);
            std::fflush(stdout);
            char js[900];
            std::snprintf(js, sizeof js,
                          "%s  {\"name\": \"%s\", \"variant\": \"%s\", \"format\": \"%s\", \"M\": %d, \"topk\": %d, \"E\": %d, "
                          "\"H\": %d, \"I\": %d, \"rows\": %d, \"active\": %d, \"max_rows\": %d, \"tiles\": %d, \"block_m\": %d, \"copies\": %d, "
                          "\"us\": %.2f, \"us_route\": %.2f, \"us_gate_up\": %.2f, \"us_down\": %.2f, \"bytes\": %.0f, "
                          "\"floor_us\": %.2f, \"flops\": %.0f, \"decode\": %s}",
                          first ? "" : ",\n", sc.name.c_str(), var.name.c_str(), std::string(to_string(sc.fmt)).c_str(),
                          r.M, r.topk, sc.E, sc.H, sc.I, rows, active, maxrows, sc.tiles, l.bm, copies, us, median(tr), median(tg),
                          median(td), bytes, floor_us, flops, sc.decode ? "true" : "false");
            json += js;
            first = false;
            if (!json_path.empty()) {  // rewritten after every measurement: a later hang loses nothing
                std::ofstream f(json_path);
                f << json << "\n]\n";
            }
        }
        CK(cudaStreamDestroy(s));
        free_workspace(ws);
        cudaFree(gu.d);
        cudaFree(dn.d);
    }
    json += "\n]\n";
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        f << json;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: moe_harness test dequant|routing|moe|moe-real|all | bench [...]\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    CK(cudaDeviceGetAttribute(&g_num_sms, cudaDevAttrMultiProcessorCount, 0));
    const std::string cmd = argv[1];
    if (cmd == "test") {
        const std::string what = argc > 2 ? argv[2] : "all";
        std::string vlist = "v3";
        for (int i = 3; i + 1 < argc; i += 2)
            if (std::string(argv[i]) == "--variants") vlist = argv[i + 1];
        g_test_variants = parse_variants(vlist);
        if (what == "dequant" || what == "all") test_dequant();
        if (what == "routing" || what == "all") test_routing();
        if (what == "moe" || what == "all") test_moe_small();
        if (what == "moe-real" || what == "all") test_moe_real();
        if (what == "moe" || what == "moe-real" || what == "all")
            for (const Variant& v : g_test_variants)
                std::printf("VARIANT %s %s (%d failed checks)\n", v.name.c_str(),
                            g_variant_failures[v.name] ? "FAIL" : "PASS", g_variant_failures[v.name]);
        std::printf("%d failure(s)\n", g_failures);
        return g_failures ? 1 : 0;
    }
    if (cmd == "bench") {
        std::string rdir, json, only, dv = "v3", pv = "v3";
        int iters = 60;
        bool probe = false;
        for (int i = 2; i + 1 < argc; i += 2) {
            const std::string a = argv[i];
            if (a == "--routing-dir") rdir = argv[i + 1];
            else if (a == "--json") json = argv[i + 1];
            else if (a == "--only") only = argv[i + 1];
            else if (a == "--iters") iters = std::atoi(argv[i + 1]);
            else if (a == "--probe") probe = std::atoi(argv[i + 1]) != 0;
            else if (a == "--variants") dv = argv[i + 1];
            else if (a == "--prefill-variants") pv = argv[i + 1];
        }
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, g_num_sms, prop.l2CacheSize >> 20);
        if (probe) read_probe();
        bench(rdir, json, only, iters, probe, parse_variants(dv), parse_variants(pv));
        return 0;
    }
    std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
    return 2;
}
