// kda_prep on the device (contract: templates/common/kda_prep_params.h). One warp per (tile of TILE new
// tokens of one sequence, head); lane l owns channels [l x K/32, (l + 1) x K/32) of the head and slides the
// conv window over the tile's tokens in registers. A sequence's conv state is read only by its first tile
// (TILE >= 3), whose warp also writes the snapshots' conv states and then the advanced state, after its own
// reads (each lane touches only its channels), so nothing races across warps.
#pragma once

#include <cuda_bf16.h>

#include "device/kda_common.cuh"
#include "common/kda_prep_params.h"

namespace kiln_dev {
namespace kda {

using kiln_params::KdaPrepParams;

constexpr int kPrepThreads = 128;

template <int K, int TILE>
__global__ void __launch_bounds__(kPrepThreads) kda_prep(const KdaPrepParams p) {
    static_assert(K % 32 == 0 && TILE >= kConvHist, "a lane owns K/32 channels; the first tile covers the conv state");
    constexpr int C = K / 32;
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * kPrepThreads + threadIdx.x) >> 5;
    const int H = p.heads;
    const long long HK = static_cast<long long>(H) * K;
    const int h = warp % H;
    int s, ti;
    find_tile(p.idx, warp / H, TILE, s, ti);
    if (s < 0) return;
    const int t0 = p.idx.cu_seqlens[s], n = p.idx.cu_seqlens[s + 1] - t0, start = p.idx.seq_start[s];
    const int tb = ti * TILE, te = min(n, tb + TILE);
    const int ch0 = h * K + lane * C;  // first channel of this lane
    const __nv_bfloat16* raw[3] = {p.q_raw, p.k_raw, p.v_raw};
    const float* taps[3] = {p.q_conv, p.k_conv, p.v_conv};
    unsigned short* conv = slot_ptr<unsigned short>(p.idx, p.idx.seq_slot[s], p.conv_offset);

    // The window before the tile's first token (only the first tile reads the conv state).
    float win[3][kConvHist][C];
    float w[3][C][4];
#pragma unroll
    for (int x = 0; x < 3; ++x)
#pragma unroll
        for (int i = 0; i < C; ++i) {
            const float4 t = *reinterpret_cast<const float4*>(taps[x] + static_cast<long long>(ch0 + i) * 4);
            w[x][i][0] = t.x;
            w[x][i][1] = t.y;
            w[x][i][2] = t.z;
            w[x][i][3] = t.w;
        }
#pragma unroll
    for (int x = 0; x < 3; ++x)
#pragma unroll
        for (int r = 0; r < kConvHist; ++r)
#pragma unroll
            for (int i = 0; i < C; ++i) {
                const int off = tb - kConvHist + r;
                const unsigned short bits =
                    off >= 0 ? __bfloat16_as_ushort(raw[x][static_cast<long long>(t0 + off) * p.raw_stride + ch0 + i])
                             : conv[(x * kConvHist + r) * HK + ch0 + i];
                win[x][r][i] = __bfloat162float(__ushort_as_bfloat16(bits));
            }

    const float a = __expf(p.a_log[h]);
    const float q_scale = rsqrtf(static_cast<float>(K));
    for (int t = tb; t < te; ++t) {
        const long long tok = t0 + t;
        float y[3][C];
        float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
        for (int x = 0; x < 3; ++x)
#pragma unroll
            for (int i = 0; i < C; ++i) {
                const float cur = __bfloat162float(raw[x][tok * p.raw_stride + ch0 + i]);
                float acc = w[x][i][0] * win[x][0][i];
                acc = fmaf(w[x][i][1], win[x][1][i], acc);
                acc = fmaf(w[x][i][2], win[x][2][i], acc);
                acc = fmaf(w[x][i][3], cur, acc);
                win[x][0][i] = win[x][1][i];
                win[x][1][i] = win[x][2][i];
                win[x][2][i] = cur;
                const float sv = acc * sigmoid_f(acc);
                y[x][i] = sv;
                if (x == 0) ssq = fmaf(sv, sv, ssq);
                if (x == 1) ssk = fmaf(sv, sv, ssk);
            }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            ssq += __shfl_xor_sync(0xffffffffu, ssq, d);
            ssk += __shfl_xor_sync(0xffffffffu, ssk, d);
        }
        const float rq = q_scale / sqrtf(ssq + 1e-6f), rk = 1.0f / sqrtf(ssk + 1e-6f);
        const long long o = tok * HK + ch0;
#pragma unroll
        for (int i = 0; i < C; ++i) {
            p.q[o + i] = y[0][i] * rq;
            p.k[o + i] = y[1][i] * rk;
            p.v[o + i] = y[2][i];
            const float zz = __bfloat162float(p.z[tok * p.z_stride + ch0 + i]) + p.dt_bias[ch0 + i];
            p.g[o + i] = p.softplus_gate ? -a * softplus_f(zz) : p.lower_bound * sigmoid_f(a * zz);
        }
        if (lane == 0) p.beta[tok * H + h] = sigmoid_f(__bfloat162float(p.beta_raw[tok * p.beta_stride + h]));
    }
    if (ti != 0) return;

    // The conv state after `e` of the step's tokens: the last three inputs, new tokens or rows of the state
    // as found. The working slot is written last and row by row: row r takes state row r + n > r (n >= 1)
    // when it takes one, which this lane has not overwritten yet.
    auto write_conv = [&](unsigned short* dst, int e) {
#pragma unroll
        for (int x = 0; x < 3; ++x)
#pragma unroll
            for (int r = 0; r < kConvHist; ++r) {
                const int off = e - kConvHist + r;
#pragma unroll
                for (int i = 0; i < C; ++i) {
                    const unsigned short bits =
                        off >= 0 ? __bfloat16_as_ushort(raw[x][static_cast<long long>(t0 + off) * p.raw_stride + ch0 + i])
                                 : conv[(x * kConvHist + kConvHist + off) * HK + ch0 + i];
                    dst[(x * kConvHist + r) * HK + ch0 + i] = bits;
                }
            }
    };
    for (int j = 0; j < p.idx.num_snaps; ++j)
        if (p.idx.snap_seq[j] == s)
            write_conv(slot_ptr<unsigned short>(p.idx, p.idx.snap_slot[j], p.conv_offset), p.idx.snap_pos[j] - start);
    write_conv(conv, n);
}

}  // namespace kda
}  // namespace kiln_dev
