// The MLA device kernels (templates/device/mla_*.cuh) run on the host: one CTA at a time, one std::thread per
// CUDA thread, with the PTX they use emulated as the PTX ISA defines it:
//   __syncthreads, warp shuffles    barriers over the CTA / the warp
//   cp.async (+ commit / wait)      completed at issue, or (KILN_EMULATE_DEFERRED=1) only at the
//                                   cp.async.wait_group that covers the group: the two extremes of the ring
//   ldmatrix(.trans) .x4            lane l supplies row l % 8 of matrix l / 8; lane l receives row l / 4,
//                                   elements 2 (l % 4) and + 1 (transposed: that column)
//   mma.sync m16n8k16 bf16 -> f32   A regs (g, 2t) (g+8, 2t) (g, 2t+8) (g+8, 2t+8); B (2t, g) (2t+8, g);
//                                   C (g, 2t) (g+8, 2t), with g = lane / 4, t = lane % 4
// Each case compares a kernel's output with an fp64 loop over the same bf16 inputs (relative L2 <= 1e-2 for
// the attention, 8e-3 for the absorption GEMMs) and counts non-finite outputs. This checks indexing, masking,
// the softmax, the pieces and the fragment layouts; it says nothing about timing, occupancy or the hardware's
// own ordering of asynchronous copies between the two extremes. The gpu op cases are the real test.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <cuda_bf16.h>

#define __CUDACC__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(x)
#define __shared__

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};
thread_local Dim3 threadIdx, blockIdx;
Dim3 gridDim, blockDim;
// The dynamic shared memory the templates declare `extern __shared__` (one CTA runs at a time).
namespace kiln_dev::mla {
alignas(16) unsigned char smem[240 * 1024];
alignas(16) float qsm[64 * 1024];
alignas(16) float osm[64 * 1024];
}  // namespace kiln_dev::mla

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
template <class T>
T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __log2f(float x) { return std::log2(x); }

struct WarpState {
    std::barrier<> bar{32};
    uint32_t word[32];
    const void* addr[32];
    uint32_t a[32][4], b[32][2];
    float c[32][4];
};
WarpState* g_warps = nullptr;
std::barrier<>* g_block = nullptr;
inline WarpState& warp_state() { return g_warps[threadIdx.x >> 5]; }
inline int lane_id() { return threadIdx.x & 31; }

inline void __syncthreads() { g_block->arrive_and_wait(); }
template <class T>
T exchange(T v, int from) {
    static_assert(sizeof(T) == 4);
    WarpState& w = warp_state();
    std::memcpy(&w.word[lane_id()], &v, 4);
    w.bar.arrive_and_wait();
    T r;
    std::memcpy(&r, &w.word[from], 4);
    w.bar.arrive_and_wait();
    return r;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int m) { return exchange(v, lane_id() ^ m); }
template <class T>
T __shfl_sync(unsigned, T v, int src) { return exchange(v, src); }
template <class T>
T __shfl_up_sync(unsigned, T v, int d) { return exchange(v, lane_id() >= d ? lane_id() - d : lane_id()); }

struct Copy {
    void* dst;
    const void* src;
    bool valid;
};
bool g_deferred = false;
thread_local std::vector<std::vector<Copy>> t_groups;  // committed, oldest first
thread_local std::vector<Copy> t_open;
inline void do_copy(const Copy& c) {
    if (c.valid) std::memcpy(c.dst, c.src, 16);
    else std::memset(c.dst, 0, 16);
}
inline void emu_cp_async16(void* dst, const void* src, bool valid) {
    if (g_deferred) t_open.push_back({dst, src, valid});
    else do_copy({dst, src, valid});
}
inline void emu_commit() {
    if (!g_deferred) return;
    t_groups.push_back(std::move(t_open));
    t_open.clear();
}
inline void emu_wait(int pending) {
    while (static_cast<int>(t_groups.size()) > pending) {
        for (const Copy& c : t_groups.front()) do_copy(c);
        t_groups.erase(t_groups.begin());
    }
}

inline void emu_ldsm(uint32_t (&r)[4], const void* p, bool trans) {
    WarpState& w = warp_state();
    const int l = lane_id();
    w.addr[l] = p;
    w.bar.arrive_and_wait();
    for (int m = 0; m < 4; ++m) {
        uint16_t lo, hi;
        if (!trans) {
            const auto* row = static_cast<const uint16_t*>(w.addr[8 * m + l / 4]);
            lo = row[2 * (l % 4)];
            hi = row[2 * (l % 4) + 1];
        } else {
            lo = static_cast<const uint16_t*>(w.addr[8 * m + 2 * (l % 4)])[l / 4];
            hi = static_cast<const uint16_t*>(w.addr[8 * m + 2 * (l % 4) + 1])[l / 4];
        }
        r[m] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
    w.bar.arrive_and_wait();
}
inline float half_of(uint32_t reg, int h) {
    const uint32_t u = (h ? reg >> 16 : reg & 0xffffu) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void emu_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    WarpState& w = warp_state();
    const int l = lane_id();
    for (int i = 0; i < 4; ++i) {
        w.a[l][i] = a[i];
        w.c[l][i] = c[i];
    }
    w.b[l][0] = b0;
    w.b[l][1] = b1;
    w.bar.arrive_and_wait();
    float A[16][16], B[16][8], C[16][8];
    for (int ln = 0; ln < 32; ++ln) {
        const int g = ln / 4, t = ln % 4;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + h] = half_of(w.a[ln][0], h);
            A[g + 8][2 * t + h] = half_of(w.a[ln][1], h);
            A[g][2 * t + 8 + h] = half_of(w.a[ln][2], h);
            A[g + 8][2 * t + 8 + h] = half_of(w.a[ln][3], h);
            B[2 * t + h][g] = half_of(w.b[ln][0], h);
            B[2 * t + 8 + h][g] = half_of(w.b[ln][1], h);
            C[g][2 * t + h] = w.c[ln][h];
            C[g + 8][2 * t + h] = w.c[ln][2 + h];
        }
    }
    const int g = l / 4, t = l % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e) {
        float s = C[rows[e]][cols[e]];
        for (int k = 0; k < 16; ++k) s += A[rows[e]][k] * B[k][cols[e]];
        c[e] = s;
    }
    w.bar.arrive_and_wait();
}

#include "device/mla_absorb.cuh"
#include "device/mla_attention_mma.cuh"
#include "device/mla_cache_append.cuh"
#include "device/mla_combine.cuh"

template <class P>
void launch(void (*kernel)(const P), Dim3 grid, int threads, const P& p) {
    gridDim = grid;
    blockDim = {unsigned(threads), 1, 1};
    std::vector<WarpState> warps(size_t(threads / 32));
    g_warps = warps.data();
    std::barrier<> block(threads);
    g_block = &block;
    for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
            std::vector<std::thread> th;
            for (int t = 0; t < threads; ++t)
                th.emplace_back([&, t, x, y] {
                    threadIdx = {unsigned(t), 1, 1};
                    blockIdx = {x, y, 1};
                    kernel(p);
                    if (!t_groups.empty() || !t_open.empty()) {
                        std::fprintf(stderr, "a thread ended with asynchronous copies outstanding\n");
                        std::abort();
                    }
                });
            for (auto& t : th) t.join();
        }
}

namespace {

using namespace kiln_params;

float to_f(uint16_t v) {
    uint32_t u = uint32_t(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint16_t to_bf(float f) { return __float2bfloat16(f).x; }

struct Seq {
    int start, tokens;
};
enum class Kernel { decode, prefill, decode_mma, prefill_mma };

int report(const char* what, double num, double den, long nonfinite, double bound) {
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool ok = rel <= bound && nonfinite == 0;
    std::printf("%-44s rel %.3e  non-finite %ld  %s\n", what, rel, nonfinite, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// Attention over a paged cache (pages shuffled over the arena), then the combine when split, against fp64.
template <int DC, int DR>
int attention(const char* what, Kernel kern, int heads, int ps, const std::vector<Seq>& seqs, int split_keys) {
    constexpr int CD = DC + DR;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 1.f);
    const int ns = int(seqs.size());
    std::vector<int> cu{0}, start, tseq, tpos, lens;
    int max_pages = 1, max_new = 0, pages = 0;
    for (int s = 0; s < ns; ++s) {
        cu.push_back(cu.back() + seqs[s].tokens);
        start.push_back(seqs[s].start);
        lens.push_back(seqs[s].start + seqs[s].tokens);
        max_pages = std::max(max_pages, (lens.back() + ps - 1) / ps);
        max_new = std::max(max_new, seqs[s].tokens);
        pages += (lens.back() + ps - 1) / ps;
        for (int i = 0; i < seqs[s].tokens; ++i) {
            tseq.push_back(s);
            tpos.push_back(seqs[s].start + i);
        }
    }
    const int T = cu.back();
    std::vector<int> perm(size_t(pages + 2));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = int(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int> table(size_t(ns) * max_pages, 0);
    int next = 0;
    for (int s = 0; s < ns; ++s)
        for (int j = 0; j < (lens[s] + ps - 1) / ps; ++j) table[size_t(s) * max_pages + j] = perm[size_t(next++)];
    const uint64_t layer_bytes = (uint64_t(ps) * CD * 2 + 255) / 256 * 256, page_bytes = 2 * layer_bytes;
    const uint64_t arena_bytes = 256 + perm.size() * page_bytes;
    std::vector<unsigned char> arena(arena_bytes, 0xFF);
    auto row = [&](int s, int j) {
        const int pg = table[size_t(s) * max_pages + j / ps];
        return reinterpret_cast<uint16_t*>(arena.data() + arena_bytes - (pg + 1) * page_bytes + layer_bytes +
                                           uint64_t(j % ps) * CD * 2);
    };
    for (int s = 0; s < ns; ++s)
        for (int j = 0; j < lens[s]; ++j)
            for (int c = 0; c < CD; ++c) row(s, j)[c] = to_bf(nd(rng));
    std::vector<uint16_t> q(size_t(T) * heads * CD);
    for (auto& v : q) v = to_bf(nd(rng));
    const int max_kv = *std::max_element(lens.begin(), lens.end());
    const int splits = (max_kv + split_keys - 1) / split_keys;
    std::vector<uint16_t> out(size_t(T) * heads * DC, 0xFFFF);
    std::vector<float> part_o(size_t(T) * heads * splits * DC, NAN), part_lse(size_t(T) * heads * splits, NAN);

    StepIndex idx{};
    idx.cu_seqlens = cu.data();
    idx.seq_start = start.data();
    idx.token_seq = tseq.data();
    idx.token_pos = tpos.data();
    idx.page_table = table.data();
    idx.arena_base = reinterpret_cast<uint64_t>(arena.data());
    idx.arena_bytes = arena_bytes;
    idx.page_bytes = page_bytes;
    idx.num_seqs = ns;
    idx.num_tokens = T;
    idx.max_pages = max_pages;
    idx.page_size = ps;
    idx.max_new_tokens = max_new;
    mla::AttentionParams p{};
    p.idx = idx;
    p.q = reinterpret_cast<const __nv_bfloat16*>(q.data());
    p.out = reinterpret_cast<__nv_bfloat16*>(out.data());
    p.part_o = part_o.data();
    p.part_lse = part_lse.data();
    p.layer_offset = layer_bytes;
    p.scale = 1.0f / std::sqrt(192.0f);
    p.heads = heads;
    p.splits = splits;
    p.split_keys = split_keys;
    const auto blocks = [&](int rows) { return unsigned((heads + rows - 1) / rows); };
    switch (kern) {
        case Kernel::decode:
            launch(&kiln_dev::mla::mla_decode<DC, DR, 16>, {unsigned(T) * blocks(16), unsigned(splits)}, 256, p);
            break;
        case Kernel::prefill:
            launch(&kiln_dev::mla::mla_prefill<DC, DR, 4, 8>,
                   {unsigned(ns * ((max_new + 3) / 4)) * blocks(8), unsigned(splits)}, 256, p);
            break;
        case Kernel::decode_mma:
            launch(&kiln_dev::mla::mla_decode_mma<DC, DR>, {unsigned(T) * blocks(32), unsigned(splits)}, 256, p);
            break;
        case Kernel::prefill_mma:
            launch(&kiln_dev::mla::mla_prefill_mma<DC, DR, 4>,
                   {unsigned(ns * ((max_new + 3) / 4)) * blocks(8), unsigned(splits)}, 256, p);
            break;
    }
    if (splits > 1) {
        mla::CombineParams c{};
        c.token_pos = tpos.data();
        c.part_o = part_o.data();
        c.part_lse = part_lse.data();
        c.out = p.out;
        c.num_tokens = T;
        c.heads = heads;
        c.splits = splits;
        c.split_keys = split_keys;
        c.d_c = DC;
        launch(&kiln_dev::mla::mla_combine, {unsigned(std::min(T * heads, 64))}, 128, c);
    }
    double num = 0, den = 0;
    long bad = 0;
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h) {
            const int s = tseq[size_t(t)], pos = tpos[size_t(t)];
            std::vector<double> sc(size_t(pos) + 1);
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= pos; ++j) {
                double d = 0;
                for (int c = 0; c < CD; ++c) d += double(to_f(q[(size_t(t) * heads + h) * CD + c])) * to_f(row(s, j)[c]);
                sc[size_t(j)] = d / std::sqrt(192.0);
                mx = std::max(mx, sc[size_t(j)]);
            }
            for (double& v : sc) sum += (v = std::exp(v - mx));
            for (int c = 0; c < DC; ++c) {
                double o = 0;
                for (int j = 0; j <= pos; ++j) o += sc[size_t(j)] / sum * to_f(row(s, j)[c]);
                const float got = to_f(out[(size_t(t) * heads + h) * DC + c]);
                if (!std::isfinite(got)) {
                    ++bad;
                    continue;
                }
                num += (got - o) * (got - o);
                den += o * o;
            }
        }
    return report(what, num, den, bad, 1e-2);
}

int absorb(const char* what, bool q_mode, bool gate, int T, int H, int dn, int dr, int dv, int dc) {
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<uint16_t> kv_b(size_t(H) * (dn + dv) * dc);
    for (auto& v : kv_b) v = to_bf(nd(rng) / std::sqrt(float(dn)));
    const int xc = q_mode ? H * (dn + dr) : H * dc, yc = q_mode ? H * (dc + dr) : H * dv;
    std::vector<uint16_t> x(size_t(T) * xc), g(size_t(T) * yc), y(size_t(T) * yc, 0xFFFF);
    for (auto& v : x) v = to_bf(nd(rng));
    for (auto& v : g) v = to_bf(nd(rng));
    mla::AbsorbParams p{};
    p.x = reinterpret_cast<const __nv_bfloat16*>(x.data());
    p.kv_b = reinterpret_cast<const __nv_bfloat16*>(kv_b.data());
    p.gate = gate ? reinterpret_cast<const __nv_bfloat16*>(g.data()) : nullptr;
    p.y = reinterpret_cast<__nv_bfloat16*>(y.data());
    p.num_tokens = T;
    p.heads = H;
    p.x_stride = xc;
    p.out_stride = yc;
    p.d_n = dn;
    p.d_r = dr;
    p.d_v = dv;
    p.d_c = dc;
    if (q_mode) launch(&kiln_dev::mla::mla_absorb_q, {unsigned(H * ((T + 31) / 32) * ((dc + 255) / 256))}, 256, p);
    else launch(&kiln_dev::mla::mla_absorb_out, {unsigned(H * ((T + 15) / 16) * ((dv + 63) / 64))}, 256, p);
    auto W = [&](int h, int r, int c) { return double(to_f(kv_b[(size_t(h) * (dn + dv) + r) * dc + c])); };
    double num = 0, den = 0;
    long bad = 0;
    const auto add = [&](float got, double want) {
        if (!std::isfinite(got)) ++bad;
        else num += (got - want) * (got - want), den += want * want;
    };
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
            if (q_mode) {
                const uint16_t* qh = x.data() + size_t(t) * xc + size_t(h) * (dn + dr);
                for (int c = 0; c < dc + dr; ++c) {
                    double r = 0;
                    if (c < dc)
                        for (int n = 0; n < dn; ++n) r += W(h, n, c) * to_f(qh[n]);
                    else r = to_f(qh[dn + c - dc]);
                    add(to_f(y[size_t(t) * yc + size_t(h) * (dc + dr) + c]), r);
                }
            } else {
                for (int j = 0; j < dv; ++j) {
                    double r = 0;
                    for (int c = 0; c < dc; ++c) r += W(h, dn + j, c) * to_f(x[size_t(t) * xc + size_t(h) * dc + c]);
                    const size_t o = size_t(t) * yc + size_t(h) * dv + j;
                    if (gate) r /= 1.0 + std::exp(-double(to_f(g[o])));
                    add(to_f(y[o]), r);
                }
            }
        }
    return report(what, num, den, bad, 8e-3);
}

int cache_append(const char* what, int ps) {
    constexpr int dc = 64, dr = 16, cd = dc + dr;
    const std::vector<Seq> seqs = {{0, 5}, {37, 1}, {100, 29}};
    std::vector<int> cu{0}, start, tseq, tpos, table;
    int max_pages = 1;
    for (const Seq& s : seqs) max_pages = std::max(max_pages, (s.start + s.tokens + ps - 1) / ps);
    int next = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
        cu.push_back(cu.back() + seqs[s].tokens);
        start.push_back(seqs[s].start);
        for (int i = 0; i < seqs[s].tokens; ++i) tseq.push_back(int(s)), tpos.push_back(seqs[s].start + i);
        for (int j = 0; j < max_pages; ++j) table.push_back(j < (seqs[s].start + seqs[s].tokens + ps - 1) / ps ? next++ : 0);
    }
    const uint64_t page_bytes = (uint64_t(ps) * cd * 2 + 255) / 256 * 256, arena_bytes = 256 + next * page_bytes;
    std::vector<unsigned char> arena(arena_bytes, 0xAB);
    const int T = cu.back();
    std::vector<uint16_t> rows(size_t(T) * cd);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = uint16_t(i * 2654435761u >> 16);
    mla::CacheAppendParams p{};
    p.idx.cu_seqlens = cu.data();
    p.idx.seq_start = start.data();
    p.idx.token_seq = tseq.data();
    p.idx.token_pos = tpos.data();
    p.idx.page_table = table.data();
    p.idx.arena_base = reinterpret_cast<uint64_t>(arena.data());
    p.idx.arena_bytes = arena_bytes;
    p.idx.page_bytes = page_bytes;
    p.idx.num_seqs = int(seqs.size());
    p.idx.num_tokens = T;
    p.idx.max_pages = max_pages;
    p.idx.page_size = ps;
    p.latent = reinterpret_cast<const __nv_bfloat16*>(rows.data());
    p.k_rope = reinterpret_cast<const __nv_bfloat16*>(rows.data()) + dc;
    p.latent_stride = p.rope_stride = cd;
    p.d_c = dc;
    p.d_r = dr;
    launch(&kiln_dev::mla::mla_cache_append, {unsigned(std::min(T, 16))}, 128, p);
    std::vector<unsigned char> want(arena_bytes, 0xAB);
    for (int t = 0; t < T; ++t) {
        const int s = tseq[size_t(t)], pos = tpos[size_t(t)];
        const int pg = table[size_t(s) * max_pages + pos / ps];
        std::memcpy(want.data() + arena_bytes - (pg + 1) * page_bytes + uint64_t(pos % ps) * cd * 2,
                    rows.data() + size_t(t) * cd, cd * 2);
    }
    long diff = 0;
    for (size_t i = 0; i < arena_bytes; ++i) diff += arena[i] != want[i];
    return report(what, double(diff), 0, 0, 0);
}

}  // namespace

int main() {
    g_deferred = std::getenv("KILN_EMULATE_DEFERRED") != nullptr;
    int f = 0;
    const std::vector<Seq> decodes = {{0, 1}, {16, 1}, {300, 1}, {100, 1}};
    const std::vector<Seq> chunks = {{0, 20}, {100, 7}, {5, 1}};
    f += attention<64, 16>("mla_decode, page size 16", Kernel::decode, 6, 16, decodes, 1024);
    f += attention<64, 16>("mla_decode, page size 1, pieces of 128", Kernel::decode, 6, 1, decodes, 128);
    f += attention<64, 16>("mla_prefill, page size 16", Kernel::prefill, 6, 16, chunks, 1024);
    f += attention<64, 16>("mla_prefill, page size 64, pieces of 64", Kernel::prefill, 6, 64, chunks, 64);
    f += attention<64, 16>("mla_decode mma, page size 16", Kernel::decode_mma, 6, 16, decodes, 1024);
    f += attention<64, 16>("mla_decode mma, 40 heads, pieces of 64", Kernel::decode_mma, 40, 1, {{0, 1}, {200, 1}, {70, 1}}, 64);
    f += attention<64, 16>("mla_prefill mma, page size 16", Kernel::prefill_mma, 10, 16, chunks, 1024);
    f += attention<64, 16>("mla_prefill mma, pieces of 64", Kernel::prefill_mma, 10, 64, chunks, 64);
    f += attention<512, 64>("mla_decode K3 latent, pieces of 128", Kernel::decode, 16, 64, {{200, 1}, {70, 1}}, 128);
    f += attention<512, 64>("mla_decode mma K3 latent, 33 heads", Kernel::decode_mma, 33, 16, {{200, 1}, {70, 1}}, 128);
    f += attention<512, 64>("mla_prefill mma K3 latent, pieces of 64", Kernel::prefill_mma, 8, 16, {{60, 9}, {0, 5}}, 64);
    f += absorb("mla_absorb q, K3 dims", true, false, 37, 3, 128, 64, 128, 512);
    f += absorb("mla_absorb q, small", true, false, 5, 3, 32, 16, 48, 64);
    f += absorb("mla_absorb out, K3 dims", false, false, 37, 2, 128, 64, 128, 512);
    f += absorb("mla_absorb out, gated", false, true, 19, 3, 32, 16, 48, 64);
    for (int ps : {1, 16, 64}) f += cache_append(ps == 1 ? "mla_cache_append, page size 1" : ps == 16 ? "mla_cache_append, page size 16" : "mla_cache_append, page size 64", ps);
    std::printf("%s\n", f ? "FAILED" : "all ok");
    return f ? 1 : 0;
}
