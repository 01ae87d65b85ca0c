// bf16 GEMM y = x · Wᵀ with fp32 accumulation on the host target (contract:
// templates/common/linear_params.h). Tiles of kMB rows x kNB columns run in parallel (columns first, so a
// decode call of a few rows still spreads over the pool); K goes in chunks of kKC converted to fp32 on the
// stack, W transposed within the chunk so the inner loop runs over kNB contiguous columns (vectorised
// without reassociating any sum: every y element accumulates in K order).
#pragma once

#include "host/prelude.hpp"
#include "common/linear_params.h"

namespace kiln_host {

template <bool kF32Out>
inline void linear(const kiln_host_ctx* ctx, const kiln_params::LinearParams& p) {
    constexpr int kMB = 4, kNB = 16, kKC = 128;
    const i64 M = p.m, N = p.n, K = p.k;
    const i64 mt = ceil_div(M, kMB), nt = ceil_div(N, kNB);
    auto tile = [&](i64 idx) {
        const i64 m0 = (idx % mt) * kMB, n0 = (idx / mt) * kNB;
        const i64 rows = min(kMB, M - m0), cols = min(kNB, N - n0);
        float acc[kMB][kNB];
        for (int i = 0; i < kMB; ++i)
            for (int j = 0; j < kNB; ++j) acc[i][j] = 0.0f;
        float xs[kMB][kKC];
        float wt[kKC][kNB];
        for (i64 k0 = 0; k0 < K; k0 += kKC) {
            const i64 kc = min(kKC, K - k0);
            for (i64 i = 0; i < rows; ++i)
                for (i64 k = 0; k < kc; ++k) xs[i][k] = bf16_to_f32(p.x[(m0 + i) * K + k0 + k]);
            for (i64 j = 0; j < kNB; ++j)
                for (i64 k = 0; k < kc; ++k) wt[k][j] = j < cols ? bf16_to_f32(p.w[(n0 + j) * K + k0 + k]) : 0.0f;
            for (i64 i = 0; i < rows; ++i)
                for (i64 k = 0; k < kc; ++k) {
                    const float xv = xs[i][k];
                    for (int j = 0; j < kNB; ++j) acc[i][j] += xv * wt[k][j];
                }
        }
        for (i64 i = 0; i < rows; ++i)
            for (i64 j = 0; j < cols; ++j) {
                if (kF32Out) p.y_f32[(m0 + i) * N + n0 + j] = acc[i][j];
                else p.y_bf16[(m0 + i) * N + n0 + j] = f32_to_bf16(acc[i][j]);
            }
    };
    auto body = [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) tile(i);
    };
    if (mt * nt == 1) body(0, 1);
    else parallel_for(ctx, mt * nt, 1, body);
}

}  // namespace kiln_host
