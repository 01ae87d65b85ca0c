// kda_chunk on the device (contract: templates/common/kda_chunk_params.h). One CTA of 256 threads per
// (sequence, head, slice of 32 value columns); the slice's fp32 state [K, 32] stays in shared memory for
// the whole sequence, which runs chunk after chunk (chunks end at absolute multiples of 64). Per chunk, in
// the order of the host kernel (templates/host/kda.hpp):
//   1 load k, q, g (Γ = cumulative sum within the chunk), the v slice and β
//   2 A[r,i] = β_r Σ_c k_r k_i e^(Γ_r−Γ_i) (i < r), Aq[r,i] = Σ_c q_r k_i e^(Γ_r−Γ_i) (i ≤ r): the exponent
//     is always the difference (≤ 0), never factored
//   3 T = (I + A)^-1 Diag(β) by forward substitution; decayed rows e^Γ ⊙ k, e^Γ ⊙ q, e^(Γ_last−Γ) ⊙ k
//   4 W = T (e^Γ ⊙ K), U = T V in place, a column per thread, last row first
//   5 V_new = U − W S and (e^Γ ⊙ Q) S;  6 o = (e^Γ ⊙ Q) S + Aq V_new, S ← Diag(e^Γ_last) S + (e^(Γ_last−Γ) ⊙ K)ᵀ V_new
// The A / W / Aq work does not depend on the slice and is repeated by the K/32 CTAs of a head.
// Rows of K values are padded to K + 1 floats (a warp reading one column of 32 rows hits 32 banks).
#pragma once

#include "device/kda_common.cuh"
#include "common/kda_chunk_params.h"

namespace kiln_dev {
namespace kda {

using kiln_params::KdaChunkParams;

constexpr int kChunkThreads = 256;
constexpr int kChunkSlice = 32;  // value columns per CTA

// Dynamic shared memory of kda_chunk<K> (the family sizes the launch with the same formula).
__host__ __device__ constexpr int chunk_smem_floats(int K) {
    return 4 * kChunk * (K + 1) + 3 * kChunk * (kChunk + 1) + K * kChunkSlice + kChunk * (kChunkSlice + 1) + kChunk + K;
}

template <int K>
__global__ void __launch_bounds__(kChunkThreads, 1) kda_chunk(const KdaChunkParams p) {
    constexpr int VS = kChunkSlice, NS = K / VS, KP = K + 1, CP = kChunk + 1, VP = VS + 1;
    constexpr int kPer = kChunk * VS / kChunkThreads;  // (row, column) outputs per thread
    static_assert(K % VS == 0 && K <= kChunkThreads - VS, "K: a multiple of 32, at most 224");
    extern __shared__ float smem[];
    float* Kc = smem;
    float* Qc = Kc + kChunk * KP;
    float* G = Qc + kChunk * KP;
    float* W = G + kChunk * KP;
    float* A = W + kChunk * KP;
    float* Aq = A + kChunk * CP;
    float* T = Aq + kChunk * CP;
    float* Ss = T + kChunk * CP;
    float* Vc = Ss + K * VS;
    float* beta = Vc + kChunk * VP;
    float* glast = beta + kChunk;

    const int tid = threadIdx.x;
    const int H = p.heads;
    const int part = blockIdx.x % NS, h = (blockIdx.x / NS) % H, s = blockIdx.x / (NS * H);
    if (s >= p.idx.num_seqs) return;
    const int c0 = p.idx.cu_seqlens[s], n_tok = p.idx.cu_seqlens[s + 1] - c0, start = p.idx.seq_start[s];
    if (n_tok <= 0 || (p.skip_single && n_tok == 1)) return;
    const long long HK = static_cast<long long>(H) * K;
    const int v0 = part * VS;
    float* S = slot_ptr<float>(p.idx, p.idx.seq_slot[s], p.state_offset) + static_cast<long long>(h) * K * K;
    for (int x = tid; x < K * VS; x += kChunkThreads) Ss[x] = S[(x / VS) * K + v0 + x % VS];

    for (int t0 = 0; t0 < n_tok;) {
        const int pos = start + t0;
        const int n = min(n_tok - t0, kChunk - pos % kChunk);
        __syncthreads();  // the previous chunk (or the state load) is done with every buffer
        // 1
        for (int x = tid; x < n * K; x += kChunkThreads) {
            const int r = x / K, c = x % K;
            const long long at = static_cast<long long>(c0 + t0 + r) * HK + h * K + c;
            Kc[r * KP + c] = p.k[at];
            Qc[r * KP + c] = p.q[at];
            G[r * KP + c] = p.g[at];
        }
        for (int x = tid; x < n * VS; x += kChunkThreads) {
            const int r = x / VS, j = x % VS;
            Vc[r * VP + j] = p.v[static_cast<long long>(c0 + t0 + r) * HK + h * K + v0 + j];
        }
        if (tid < n) beta[tid] = p.beta[static_cast<long long>(c0 + t0 + tid) * H + h];
        __syncthreads();
        for (int c = tid; c < K; c += kChunkThreads) {
            float acc = 0.0f;
            for (int r = 0; r < n; ++r) {
                acc += G[r * KP + c];
                G[r * KP + c] = acc;
            }
            glast[c] = acc;
        }
        __syncthreads();
        // 2
        for (int x = tid; x < n * n; x += kChunkThreads) {
            const int r = x / n, i = x % n;
            float ak = 0.0f, aq = 0.0f;
            if (i <= r) {
                const float* kr = Kc + r * KP;
                const float* qr = Qc + r * KP;
                const float* ki = Kc + i * KP;
                const float* gr = G + r * KP;
                const float* gi = G + i * KP;
#pragma unroll 8
                for (int c = 0; c < K; ++c) {
                    const float d = __expf(gr[c] - gi[c]) * ki[c];
                    ak = fmaf(kr[c], d, ak);
                    aq = fmaf(qr[c], d, aq);
                }
            }
            A[r * CP + i] = i < r ? beta[r] * ak : 0.0f;
            Aq[r * CP + i] = aq;
        }
        __syncthreads();
        // 3: decayed rows (disjoint from T's buffers), then T row by row
        for (int x = tid; x < n * K; x += kChunkThreads) {
            const int r = x / K, c = x % K;
            const float gv = G[r * KP + c];
            const float eg = __expf(gv);
            W[r * KP + c] = eg * Kc[r * KP + c];
            Qc[r * KP + c] *= eg;
            Kc[r * KP + c] *= __expf(glast[c] - gv);
        }
        for (int r = 0; r < n; ++r) {
            if (tid < r) {
                float acc = 0.0f;
                for (int i = tid; i < r; ++i) acc = fmaf(A[r * CP + i], T[i * CP + tid], acc);
                T[r * CP + tid] = -acc;
            } else if (tid == r) {
                T[r * CP + r] = beta[r];
            }
            __syncthreads();
        }
        // 4
        for (int col = tid; col < K + VS; col += kChunkThreads) {
            float* base = col < K ? W + col : Vc + (col - K);
            const int stride = col < K ? KP : VP;
            for (int r = n - 1; r >= 0; --r) {
                float acc = 0.0f;
                for (int i = 0; i <= r; ++i) acc = fmaf(T[r * CP + i], base[i * stride], acc);
                base[r * stride] = acc;
            }
        }
        __syncthreads();
        // 5
        float inter[kPer];
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
            const int x = tid + e * kChunkThreads;
            inter[e] = 0.0f;
            if (x < n * VS) {
                const int r = x / VS, j = x % VS;
                float vn = Vc[r * VP + j], oi = 0.0f;
                const float* wr = W + r * KP;
                const float* qr = Qc + r * KP;
#pragma unroll 8
                for (int c = 0; c < K; ++c) {
                    const float sv = Ss[c * VS + j];
                    vn = fmaf(-wr[c], sv, vn);
                    oi = fmaf(qr[c], sv, oi);
                }
                inter[e] = oi;
                Vc[r * VP + j] = vn;
            }
        }
        __syncthreads();
        // 6
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
            const int x = tid + e * kChunkThreads;
            if (x < n * VS) {
                const int r = x / VS, j = x % VS;
                float acc = inter[e];
                for (int i = 0; i <= r; ++i) acc = fmaf(Aq[r * CP + i], Vc[i * VP + j], acc);
                p.o[static_cast<long long>(c0 + t0 + r) * HK + h * K + v0 + j] = acc;
            }
        }
        for (int x = tid; x < K * VS; x += kChunkThreads) {
            const int c = x / VS, j = x % VS;
            float acc = __expf(glast[c]) * Ss[x];
            for (int r = 0; r < n; ++r) acc = fmaf(Kc[r * KP + c], Vc[r * VP + j], acc);
            Ss[x] = acc;
        }
        t0 += n;
        __syncthreads();
        for (int q = 0; q < p.idx.num_snaps; ++q)
            if (p.idx.snap_seq[q] == s && p.idx.snap_pos[q] == start + t0) {
                float* dst = slot_ptr<float>(p.idx, p.idx.snap_slot[q], p.state_offset) + static_cast<long long>(h) * K * K;
                for (int x = tid; x < K * VS; x += kChunkThreads) dst[(x / VS) * K + v0 + x % VS] = Ss[x];
            }
    }
    for (int x = tid; x < K * VS; x += kChunkThreads) S[(x / VS) * K + v0 + x % VS] = Ss[x];
}

}  // namespace kda
}  // namespace kiln_dev
