// KDA on the host thread pool: the four families' contracts (templates/common/kda_*_params.h), one task
// per (sequence, head) so that each task owns its slot's part alone.
//   prep      conv 4 over (conv state, new tokens), SiLU, L2 norms, q scale, gate, beta; conv state of the
//             working slot advanced, snapshots' conv states written
//   chunk     the chunkwise delta rule (k3-model.md §1.3) over chunks aligned to absolute multiples of 64,
//             exp(Γ_r − Γ_i) always on the difference; the state in the slot updated in place, snapshots
//             copied at chunk ends
//   decode    one recurrent step per single-token sequence
//   out_norm  RMSNorm(o_h) ⊙ o_norm ⊙ sigmoid(gate_h)
// The device kernels (templates/device/kda_*.cuh) compute the same, in the same order of chunk phases.
#pragma once

#include "host/prelude.hpp"
#include "common/kda_chunk_params.h"
#include "common/kda_decode_params.h"
#include "common/kda_out_norm_params.h"
#include "common/kda_prep_params.h"

namespace kiln_host {
namespace kda {

using kiln_params::KdaChunkParams;
using kiln_params::KdaDecodeParams;
using kiln_params::KdaOutNormParams;
using kiln_params::KdaPrepParams;
using kiln_params::StepIndex;

constexpr int kChunk = 64;
constexpr int kConvHist = 3;  // conv 4: the state holds the last three projected inputs

inline float sigmoid_f(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
inline float softplus_f(float x) { return x > 20.0f ? x : __builtin_log1pf(__builtin_expf(x)); }

template <typename T>
inline T* slot_ptr(const StepIndex& x, i32 slot, u64 offset) {
    return reinterpret_cast<T*>(x.arena_base + static_cast<u64>(slot) * x.slot_bytes + offset);
}

template <int K>
void prep(const kiln_host_ctx* ctx, const KdaPrepParams& p) {
    const i64 H = p.heads, HK = H * K;
    const float q_scale = 1.0f / __builtin_sqrtf(static_cast<float>(K));
    auto body = [&](i64 b, i64 e) {
        for (i64 item = b; item < e; ++item) {
            const i32 s = static_cast<i32>(item / H), h = static_cast<i32>(item % H);
            const i32 t0 = p.idx.cu_seqlens[s], n = p.idx.cu_seqlens[s + 1] - t0, start = p.idx.seq_start[s];
            u16* conv = slot_ptr<u16>(p.idx, p.idx.seq_slot[s], p.conv_offset);
            const u16* raw[3] = {p.q_raw, p.k_raw, p.v_raw};
            const float* taps[3] = {p.q_conv, p.k_conv, p.v_conv};
            u16 old[3][kConvHist][K];  // the conv state as the step found it
            for (int x = 0; x < 3; ++x)
                for (int r = 0; r < kConvHist; ++r)
                    for (int i = 0; i < K; ++i) old[x][r][i] = conv[(x * kConvHist + r) * HK + h * K + i];
            // Projected input x at offset `off` of the step's tokens (negative: the conv state).
            auto input = [&](int x, i32 off, int i) -> u16 {
                return off >= 0 ? raw[x][static_cast<i64>(t0 + off) * p.raw_stride + h * K + i] : old[x][kConvHist + off][i];
            };
            const float a = __builtin_expf(p.a_log[h]);
            for (i32 t = 0; t < n; ++t) {
                const i64 tok = t0 + t;
                float y[3][K];
                float ss[2] = {0.0f, 0.0f};
                for (int x = 0; x < 3; ++x)
                    for (int i = 0; i < K; ++i) {
                        const float* w = taps[x] + (h * K + i) * 4;
                        float acc = 0.0f;
                        for (int j = 0; j < 4; ++j) acc += w[j] * bf16_to_f32(input(x, t - kConvHist + j, i));
                        const float sv = acc * sigmoid_f(acc);
                        y[x][i] = sv;
                        if (x < 2) ss[x] += sv * sv;
                    }
                const float rq = q_scale / __builtin_sqrtf(ss[0] + 1e-6f), rk = 1.0f / __builtin_sqrtf(ss[1] + 1e-6f);
                float* q = p.q + tok * HK + h * K;
                float* k = p.k + tok * HK + h * K;
                float* v = p.v + tok * HK + h * K;
                float* g = p.g + tok * HK + h * K;
                for (int i = 0; i < K; ++i) {
                    q[i] = y[0][i] * rq;
                    k[i] = y[1][i] * rk;
                    v[i] = y[2][i];
                    const float zz = bf16_to_f32(p.z[tok * p.z_stride + h * K + i]) + p.dt_bias[h * K + i];
                    g[i] = p.softplus_gate ? -a * softplus_f(zz) : p.lower_bound * sigmoid_f(a * zz);
                }
                p.beta[tok * H + h] = sigmoid_f(bf16_to_f32(p.beta_raw[tok * p.beta_stride + h]));
            }
            // The conv state after `e` of the step's tokens into `dst`.
            auto write_conv = [&](u16* dst, i32 e) {
                for (int x = 0; x < 3; ++x)
                    for (int r = 0; r < kConvHist; ++r)
                        for (int i = 0; i < K; ++i) dst[(x * kConvHist + r) * HK + h * K + i] = input(x, e - kConvHist + r, i);
            };
            for (i32 j = 0; j < p.idx.num_snaps; ++j)
                if (p.idx.snap_seq[j] == s)
                    write_conv(slot_ptr<u16>(p.idx, p.idx.snap_slot[j], p.conv_offset), p.idx.snap_pos[j] - start);
            write_conv(conv, n);
        }
    };
    parallel_for(ctx, static_cast<i64>(p.idx.num_seqs) * H, 1, body);
}

template <int K>
void chunk(const kiln_host_ctx* ctx, const KdaChunkParams& p) {
    constexpr int V = K;
    const i64 H = p.heads, HK = H * K;
    auto body = [&](i64 b, i64 e) {
        for (i64 item = b; item < e; ++item) {
            const i32 s = static_cast<i32>(item / H), h = static_cast<i32>(item % H);
            const i32 c0 = p.idx.cu_seqlens[s], n_tok = p.idx.cu_seqlens[s + 1] - c0, start = p.idx.seq_start[s];
            if (p.skip_single && n_tok == 1) continue;
            float* S = slot_ptr<float>(p.idx, p.idx.seq_slot[s], p.state_offset) + static_cast<i64>(h) * K * V;
            float Kc[kChunk][K], Qc[kChunk][K], G[kChunk][K], W[kChunk][K], Vc[kChunk][V];
            float A[kChunk][kChunk], Aq[kChunk][kChunk], T[kChunk][kChunk], beta[kChunk], glast[K];
            for (i32 t0 = 0; t0 < n_tok;) {
                const i32 pos = start + t0;
                const i32 n = static_cast<i32>(min(n_tok - t0, kChunk - pos % kChunk));
                // 1. the chunk's rows; Γ = cumulative log decay within the chunk
                for (int r = 0; r < n; ++r) {
                    const i64 tok = c0 + t0 + r;
                    for (int c = 0; c < K; ++c) {
                        Kc[r][c] = p.k[tok * HK + h * K + c];
                        Qc[r][c] = p.q[tok * HK + h * K + c];
                        G[r][c] = p.g[tok * HK + h * K + c] + (r ? G[r - 1][c] : 0.0f);
                    }
                    for (int j = 0; j < V; ++j) Vc[r][j] = p.v[tok * HK + h * V + j];
                    beta[r] = p.beta[tok * H + h];
                }
                // 2. A[r,i] = β_r Σ k_r k_i e^(Γ_r−Γ_i) (i < r), Aq[r,i] = Σ q_r k_i e^(Γ_r−Γ_i) (i ≤ r)
                for (int r = 0; r < n; ++r)
                    for (int i = 0; i <= r; ++i) {
                        float ak = 0.0f, aq = 0.0f;
                        for (int c = 0; c < K; ++c) {
                            const float d = __builtin_expf(G[r][c] - G[i][c]) * Kc[i][c];
                            ak += Kc[r][c] * d;
                            aq += Qc[r][c] * d;
                        }
                        A[r][i] = i < r ? beta[r] * ak : 0.0f;
                        Aq[r][i] = aq;
                    }
                // 3. T = (I + A)^-1 Diag(β), forward substitution row by row
                for (int r = 0; r < n; ++r) {
                    for (int col = 0; col < r; ++col) {
                        float acc = 0.0f;
                        for (int i = col; i < r; ++i) acc += A[r][i] * T[i][col];
                        T[r][col] = -acc;
                    }
                    T[r][r] = beta[r];
                }
                // 4. decayed rows: W ← e^Γ ⊙ K, Q ← e^Γ ⊙ Q, K ← e^(Γ_last − Γ) ⊙ K
                for (int c = 0; c < K; ++c) glast[c] = G[n - 1][c];
                for (int r = 0; r < n; ++r)
                    for (int c = 0; c < K; ++c) {
                        const float eg = __builtin_expf(G[r][c]);
                        W[r][c] = eg * Kc[r][c];
                        Qc[r][c] *= eg;
                        Kc[r][c] *= __builtin_expf(glast[c] - G[r][c]);
                    }
                // 5. W = T (e^Γ ⊙ K), U = T V (in place, last row first)
                for (int r = n - 1; r >= 0; --r) {
                    for (int c = 0; c < K; ++c) {
                        float acc = 0.0f;
                        for (int i = 0; i <= r; ++i) acc += T[r][i] * W[i][c];
                        W[r][c] = acc;
                    }
                    for (int j = 0; j < V; ++j) {
                        float acc = 0.0f;
                        for (int i = 0; i <= r; ++i) acc += T[r][i] * Vc[i][j];
                        Vc[r][j] = acc;
                    }
                }
                // 6. pseudo-values V_new = U − W S (in place); o = (e^Γ ⊙ Q) S + Aq V_new
                for (int r = 0; r < n; ++r) {
                    float vn[V], oi[V];
                    for (int j = 0; j < V; ++j) {
                        vn[j] = Vc[r][j];
                        oi[j] = 0.0f;
                    }
                    for (int c = 0; c < K; ++c) {
                        const float w = W[r][c], q = Qc[r][c];
                        const float* srow = S + c * V;
                        for (int j = 0; j < V; ++j) {
                            vn[j] -= w * srow[j];
                            oi[j] += q * srow[j];
                        }
                    }
                    for (int j = 0; j < V; ++j) Vc[r][j] = vn[j];
                    float* o = p.o + static_cast<i64>(c0 + t0 + r) * HK + h * V;
                    for (int j = 0; j < V; ++j) o[j] = oi[j];
                }
                for (int r = 0; r < n; ++r) {
                    float* o = p.o + static_cast<i64>(c0 + t0 + r) * HK + h * V;
                    for (int i = 0; i <= r; ++i) {
                        const float a = Aq[r][i];
                        for (int j = 0; j < V; ++j) o[j] += a * Vc[i][j];
                    }
                }
                // 7. S ← Diag(e^Γ_last) S + (e^(Γ_last − Γ) ⊙ K)^T V_new
                for (int c = 0; c < K; ++c) {
                    float* srow = S + c * V;
                    const float d = __builtin_expf(glast[c]);
                    float acc[V];
                    for (int j = 0; j < V; ++j) acc[j] = d * srow[j];
                    for (int r = 0; r < n; ++r) {
                        const float kd = Kc[r][c];
                        for (int j = 0; j < V; ++j) acc[j] += kd * Vc[r][j];
                    }
                    for (int j = 0; j < V; ++j) srow[j] = acc[j];
                }
                t0 += n;
                for (i32 j = 0; j < p.idx.num_snaps; ++j)
                    if (p.idx.snap_seq[j] == s && p.idx.snap_pos[j] == start + t0) {
                        float* dst = slot_ptr<float>(p.idx, p.idx.snap_slot[j], p.state_offset) + static_cast<i64>(h) * K * V;
                        for (int x = 0; x < K * V; ++x) dst[x] = S[x];
                    }
            }
        }
    };
    parallel_for(ctx, static_cast<i64>(p.idx.num_seqs) * H, 1, body);
}

template <int K>
void decode(const kiln_host_ctx* ctx, const KdaDecodeParams& p) {
    constexpr int V = K;
    const i64 H = p.heads, HK = H * K;
    auto body = [&](i64 b, i64 e) {
        for (i64 item = b; item < e; ++item) {
            const i32 s = static_cast<i32>(item / H), h = static_cast<i32>(item % H);
            const i32 tok = p.idx.cu_seqlens[s];
            if (p.idx.cu_seqlens[s + 1] - tok != 1) continue;
            float* S = slot_ptr<float>(p.idx, p.idx.seq_slot[s], p.state_offset) + static_cast<i64>(h) * K * V;
            const float* q = p.q + tok * HK + h * K;
            const float* k = p.k + tok * HK + h * K;
            const float* v = p.v + tok * HK + h * V;
            const float* g = p.g + tok * HK + h * K;
            const float beta = p.beta[static_cast<i64>(tok) * H + h];
            float sk[V], sq[V], kq = 0.0f;
            for (int j = 0; j < V; ++j) sk[j] = sq[j] = 0.0f;
            for (int c = 0; c < K; ++c) {
                const float a = __builtin_expf(g[c]);
                float* srow = S + c * V;
                for (int j = 0; j < V; ++j) {
                    const float x = srow[j] * a;
                    srow[j] = x;
                    sk[j] += x * k[c];
                    sq[j] += x * q[c];
                }
                kq += k[c] * q[c];
            }
            // o = S^T q with S = S' + k δ^T: S'^T q + δ (k · q)
            float* o = p.o + static_cast<i64>(tok) * HK + h * V;
            for (int j = 0; j < V; ++j) {
                const float d = beta * (v[j] - sk[j]);
                sk[j] = d;
                o[j] = sq[j] + d * kq;
            }
            for (int c = 0; c < K; ++c) {
                float* srow = S + c * V;
                for (int j = 0; j < V; ++j) srow[j] += k[c] * sk[j];
            }
            const i32 pos = p.idx.seq_start[s] + 1;
            for (i32 j = 0; j < p.idx.num_snaps; ++j)
                if (p.idx.snap_seq[j] == s && p.idx.snap_pos[j] == pos) {
                    float* dst = slot_ptr<float>(p.idx, p.idx.snap_slot[j], p.state_offset) + static_cast<i64>(h) * K * V;
                    for (int x = 0; x < K * V; ++x) dst[x] = S[x];
                }
        }
    };
    parallel_for(ctx, static_cast<i64>(p.idx.num_seqs) * H, 1, body);
}

template <int K>
void out_norm(const kiln_host_ctx* ctx, const KdaOutNormParams& p) {
    const i64 H = p.heads;
    auto body = [&](i64 b, i64 e) {
        for (i64 item = b; item < e; ++item) {
            const i64 t = item / H, h = item % H;
            const float* o = p.o + t * H * K + h * K;
            float ss = 0.0f;
            for (int i = 0; i < K; ++i) ss += o[i] * o[i];
            const float r = 1.0f / __builtin_sqrtf(ss / K + p.eps);
            for (int i = 0; i < K; ++i) {
                const float gate = bf16_to_f32(p.gate[t * p.gate_stride + h * K + i]);
                p.out[t * p.out_stride + h * K + i] = f32_to_bf16(o[i] * r * p.o_norm[i] * sigmoid_f(gate));
            }
        }
    };
    parallel_for(ctx, static_cast<i64>(p.num_tokens) * H, 16, body);
}

}  // namespace kda
}  // namespace kiln_host
