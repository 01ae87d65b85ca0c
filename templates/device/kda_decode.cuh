// kda_decode on the device (contract: templates/common/kda_decode_params.h). One CTA of 128 threads per
// (single-token sequence, head, 1/VSPLIT of the value columns). The slice of the fp32 state is read once
// into registers (each thread: 4 adjacent columns of K / row-groups rows; a warp reads whole row segments),
// decayed, reduced against k and q across row groups through shared memory, updated and written once:
//   S' = Diag(e^g) S;  δ = β (v − S'ᵀk);  o = S'ᵀq + δ (k·q);  S = S' + k δᵀ
#pragma once

#include "device/kda_common.cuh"
#include "common/kda_decode_params.h"

namespace kiln_dev {
namespace kda {

using kiln_params::KdaDecodeParams;

constexpr int kDecodeThreads = 128;

template <int K, int VSPLIT>
__global__ void __launch_bounds__(kDecodeThreads) kda_decode(const KdaDecodeParams p) {
    constexpr int VC = K / VSPLIT, TPR = VC / 4, RG = kDecodeThreads / TPR, RPT = K / RG;
    static_assert(VC % 4 == 0 && kDecodeThreads % TPR == 0 && RG <= K && K % RG == 0, "K / VSPLIT split");
    __shared__ float4 red_k[RG][TPR], red_q[RG][TPR];
    __shared__ float vp[VC];
    __shared__ float kq_s;
    const int tid = threadIdx.x;
    const int H = p.heads;
    const int part = blockIdx.x % VSPLIT, h = (blockIdx.x / VSPLIT) % H, s = blockIdx.x / (VSPLIT * H);
    if (s >= p.idx.num_seqs) return;
    const int tok = p.idx.cu_seqlens[s];
    if (p.idx.cu_seqlens[s + 1] - tok != 1) return;
    const long long HK = static_cast<long long>(H) * K;
    const int cg = tid % TPR, rg = tid / TPR;
    const int col = part * VC + cg * 4;
    float* S = slot_ptr<float>(p.idx, p.idx.seq_slot[s], p.state_offset) + static_cast<long long>(h) * K * K;
    const float* q = p.q + tok * HK + h * K;
    const float* k = p.k + tok * HK + h * K;
    const float* g = p.g + tok * HK + h * K;
    float4 st[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) st[i] = *reinterpret_cast<const float4*>(S + (rg + i * RG) * K + col);
    float4 pk = make_float4(0.f, 0.f, 0.f, 0.f), pq = pk;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const int c = rg + i * RG;
        const float a = __expf(g[c]), kc = k[c], qc = q[c];
        st[i].x *= a;
        st[i].y *= a;
        st[i].z *= a;
        st[i].w *= a;
        pk.x = fmaf(st[i].x, kc, pk.x);
        pk.y = fmaf(st[i].y, kc, pk.y);
        pk.z = fmaf(st[i].z, kc, pk.z);
        pk.w = fmaf(st[i].w, kc, pk.w);
        pq.x = fmaf(st[i].x, qc, pq.x);
        pq.y = fmaf(st[i].y, qc, pq.y);
        pq.z = fmaf(st[i].z, qc, pq.z);
        pq.w = fmaf(st[i].w, qc, pq.w);
    }
    red_k[rg][cg] = pk;
    red_q[rg][cg] = pq;
    if (tid < 32) {
        float kq = 0.0f;
        for (int c = tid; c < K; c += 32) kq = fmaf(k[c], q[c], kq);
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) kq += __shfl_xor_sync(0xffffffffu, kq, d);
        if (tid == 0) kq_s = kq;
    }
    __syncthreads();
    if (tid < VC) {
        const int j = tid;
        float sk = 0.0f, sq = 0.0f;
        for (int r = 0; r < RG; ++r) {
            sk += reinterpret_cast<const float*>(&red_k[r][j / 4])[j % 4];
            sq += reinterpret_cast<const float*>(&red_q[r][j / 4])[j % 4];
        }
        const float beta = p.beta[static_cast<long long>(tok) * H + h];
        const float d = beta * (p.v[tok * HK + h * K + part * VC + j] - sk);
        vp[j] = d;
        p.o[tok * HK + h * K + part * VC + j] = sq + d * kq_s;
    }
    __syncthreads();
    float* snap = nullptr;
    for (int j = 0; j < p.idx.num_snaps; ++j)
        if (p.idx.snap_seq[j] == s && p.idx.snap_pos[j] == p.idx.seq_start[s] + 1)
            snap = slot_ptr<float>(p.idx, p.idx.snap_slot[j], p.state_offset) + static_cast<long long>(h) * K * K;
    const float4 d = *reinterpret_cast<const float4*>(vp + cg * 4);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const int c = rg + i * RG;
        const float kc = k[c];
        st[i].x = fmaf(kc, d.x, st[i].x);
        st[i].y = fmaf(kc, d.y, st[i].y);
        st[i].z = fmaf(kc, d.z, st[i].z);
        st[i].w = fmaf(kc, d.w, st[i].w);
        *reinterpret_cast<float4*>(S + c * K + col) = st[i];
        if (snap) *reinterpret_cast<float4*>(snap + c * K + col) = st[i];
    }
}

}  // namespace kda
}  // namespace kiln_dev
