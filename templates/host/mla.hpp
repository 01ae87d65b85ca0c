// The MLA families on the host target (the device versions are templates/device/mla_*.cuh; the contracts are
// the parameter headers templates/common/mla_*_params.h):
//   cache_append        one cache row per new token, into its page
//   absorb_q/absorb_out the per-head products with W_UK and W_UV (blocks of 8 tokens share each weight row)
//   attention<DC, DR>   absorbed attention over the paged latent: one work item per (token, 8 heads, context
//                       piece); each key row is converted once for the 8 heads; online softmax in fp32
//   combine             the pieces of the tokens with more than one
// fp32 accumulation everywhere, one bf16 rounding of every bf16 output.
#pragma once

#include "host/prelude.hpp"
#include "common/mla_absorb_params.h"
#include "common/mla_attention_params.h"
#include "common/mla_cache_append_params.h"
#include "common/mla_combine_params.h"

namespace kiln_host::mla {

using kiln_params::StepIndex;
using kiln_params::mla::AbsorbParams;
using kiln_params::mla::AttentionParams;
using kiln_params::mla::CacheAppendParams;
using kiln_params::mla::CombineParams;

constexpr int kMaxLatent = 1024;  // d_c (and d_v, d_n) the host kernels hold on the stack
constexpr int kTokenBlock = 8;
constexpr int kHeadBlock = 8;

// Row j (position) of sequence s in this layer's part of the paged cache.
inline u16* cache_row(const StepIndex& x, u64 layer_offset, int cache_dim, int s, int j) {
    const int page = x.page_table[static_cast<i64>(s) * x.max_pages + j / x.page_size];
    const u64 addr = x.arena_base + x.arena_bytes - static_cast<u64>(page + 1) * x.page_bytes + layer_offset +
                     static_cast<u64>(j % x.page_size) * static_cast<u64>(cache_dim) * 2;
    return reinterpret_cast<u16*>(addr);
}

inline void cache_append(const kiln_host_ctx* ctx, const CacheAppendParams& p) {
    const int cd = p.d_c + p.d_r;
    auto body = [&](i64 b, i64 e) {
        for (i64 t = b; t < e; ++t) {
            u16* row = cache_row(p.idx, p.layer_offset, cd, p.idx.token_seq[t], p.idx.token_pos[t]);
            __builtin_memcpy(row, p.latent + t * p.latent_stride, static_cast<size_t>(p.d_c) * 2);
            __builtin_memcpy(row + p.d_c, p.k_rope + t * p.rope_stride, static_cast<size_t>(p.d_r) * 2);
        }
    };
    parallel_for(ctx, p.idx.num_tokens, 64, body);
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

// qt[t, h] = (W_UK^hᵀ q_nope, q_rope): items (head, block of 8 tokens), each W_UK row read once per block.
inline void absorb_q(const kiln_host_ctx* ctx, const AbsorbParams& p) {
    const i64 tb = ceil_div(p.num_tokens, kTokenBlock);
    const int cw = p.d_c + p.d_r, qw = p.d_n + p.d_r;
    auto body = [&](i64 b, i64 e) {
        float acc[kTokenBlock][kMaxLatent];
        for (i64 item = b; item < e; ++item) {
            const int h = static_cast<int>(item / tb);
            const int t0 = static_cast<int>(item % tb) * kTokenBlock;
            const int nt = static_cast<int>(min(kTokenBlock, p.num_tokens - t0));
            for (int i = 0; i < nt; ++i)
                for (int c = 0; c < p.d_c; ++c) acc[i][c] = 0.f;
            for (int n = 0; n < p.d_n; ++n) {
                const u16* w = p.kv_b + (static_cast<i64>(h) * (p.d_n + p.d_v) + n) * p.d_c;
                for (int i = 0; i < nt; ++i) {
                    const float qv = bf16_to_f32(p.x[static_cast<i64>(t0 + i) * p.x_stride + h * qw + n]);
                    for (int c = 0; c < p.d_c; ++c) acc[i][c] += qv * bf16_to_f32(w[c]);
                }
            }
            for (int i = 0; i < nt; ++i) {
                u16* y = p.y + static_cast<i64>(t0 + i) * p.out_stride + static_cast<i64>(h) * cw;
                for (int c = 0; c < p.d_c; ++c) y[c] = f32_to_bf16(acc[i][c]);
                const u16* rope = p.x + static_cast<i64>(t0 + i) * p.x_stride + h * qw + p.d_n;
                for (int r = 0; r < p.d_r; ++r) y[p.d_c + r] = rope[r];
            }
        }
    };
    parallel_for(ctx, static_cast<i64>(p.heads) * tb, 1, body);
}

// o[t, h x d_v + j] = W_UV^h[j] · ō[t, h] (x sigmoid(gate)): items (head, block of 8 tokens).
inline void absorb_out(const kiln_host_ctx* ctx, const AbsorbParams& p) {
    const i64 tb = ceil_div(p.num_tokens, kTokenBlock);
    auto body = [&](i64 b, i64 e) {
        float ob[kTokenBlock][kMaxLatent];
        for (i64 item = b; item < e; ++item) {
            const int h = static_cast<int>(item / tb);
            const int t0 = static_cast<int>(item % tb) * kTokenBlock;
            const int nt = static_cast<int>(min(kTokenBlock, p.num_tokens - t0));
            for (int i = 0; i < nt; ++i) {
                const u16* x = p.x + static_cast<i64>(t0 + i) * p.x_stride + static_cast<i64>(h) * p.d_c;
                for (int c = 0; c < p.d_c; ++c) ob[i][c] = bf16_to_f32(x[c]);
            }
            for (int j = 0; j < p.d_v; ++j) {
                const u16* w = p.kv_b + (static_cast<i64>(h) * (p.d_n + p.d_v) + p.d_n + j) * p.d_c;
                float acc[kTokenBlock];
                for (int i = 0; i < nt; ++i) acc[i] = 0.f;
                for (int c = 0; c < p.d_c; ++c) {
                    const float wv = bf16_to_f32(w[c]);
                    for (int i = 0; i < nt; ++i) acc[i] += wv * ob[i][c];
                }
                for (int i = 0; i < nt; ++i) {
                    const i64 o = static_cast<i64>(t0 + i) * p.out_stride + static_cast<i64>(h) * p.d_v + j;
                    const float g = p.gate ? sigmoid_f(bf16_to_f32(p.gate[o])) : 1.0f;
                    p.y[o] = f32_to_bf16(acc[i] * g);
                }
            }
        }
    };
    parallel_for(ctx, static_cast<i64>(p.heads) * tb, 1, body);
}

// Whether sequence s is served by a launch with selector `only`.
inline bool serves(const StepIndex& x, int only, int s) {
    const int n = x.cu_seqlens[s + 1] - x.cu_seqlens[s];
    return only == 0 || (only == 1 ? n == 1 : n > 1);
}

template <int DC, int DR>
inline void attention(const kiln_host_ctx* ctx, const AttentionParams& p) {
    static_assert(DC <= kMaxLatent, "latent too wide for the host kernel");
    constexpr int CD = DC + DR;
    const int hbs = static_cast<int>(ceil_div(p.heads, kHeadBlock));
    const i64 items = static_cast<i64>(p.idx.num_tokens) * hbs * p.splits;
    auto body = [&](i64 b, i64 e) {
        float qf[kHeadBlock][CD];
        float acc[kHeadBlock][DC];
        float kr[CD];
        float m[kHeadBlock], l[kHeadBlock];
        for (i64 item = b; item < e; ++item) {
            const int piece = static_cast<int>(item % p.splits);
            const int hb = static_cast<int>(item / p.splits % hbs);
            const int t = static_cast<int>(item / p.splits / hbs);
            const int s = p.idx.token_seq[t], pos = p.idx.token_pos[t];
            if (!serves(p.idx, p.only, s)) continue;
            const int pieces = (pos + p.split_keys) / p.split_keys;  // ceil((pos + 1) / split_keys)
            if (piece >= pieces) continue;
            const int h0 = hb * kHeadBlock, nh = static_cast<int>(min(kHeadBlock, p.heads - h0));
            for (int i = 0; i < nh; ++i) {
                const u16* q = p.q + (static_cast<i64>(t) * p.heads + h0 + i) * CD;
                for (int c = 0; c < CD; ++c) qf[i][c] = bf16_to_f32(q[c]) * p.scale;
                for (int c = 0; c < DC; ++c) acc[i][c] = 0.f;
                m[i] = -3.0e38f;
                l[i] = 0.f;
            }
            const int lo = piece * p.split_keys;
            const int hi = static_cast<int>(min(lo + p.split_keys, pos + 1));
            for (int j = lo; j < hi; ++j) {
                const u16* row = cache_row(p.idx, p.layer_offset, CD, s, j);
                for (int c = 0; c < CD; ++c) kr[c] = bf16_to_f32(row[c]);
                for (int i = 0; i < nh; ++i) {
                    float sc = 0.f;
                    for (int c = 0; c < CD; ++c) sc += qf[i][c] * kr[c];
                    if (sc > m[i]) {  // rescale what was accumulated under the old maximum
                        const float corr = __builtin_expf(m[i] - sc);
                        l[i] *= corr;
                        for (int c = 0; c < DC; ++c) acc[i][c] *= corr;
                        m[i] = sc;
                    }
                    const float w = __builtin_expf(sc - m[i]);
                    l[i] += w;
                    for (int c = 0; c < DC; ++c) acc[i][c] += w * kr[c];
                }
            }
            for (int i = 0; i < nh; ++i) {
                const i64 r = static_cast<i64>(t) * p.heads + h0 + i;
                const float inv = 1.0f / l[i];
                if (pieces == 1) {
                    u16* o = p.out + r * DC;
                    for (int c = 0; c < DC; ++c) o[c] = f32_to_bf16(acc[i][c] * inv);
                } else {
                    float* o = p.part_o + (r * p.splits + piece) * DC;
                    for (int c = 0; c < DC; ++c) o[c] = acc[i][c] * inv;
                    p.part_lse[r * p.splits + piece] = m[i] + __builtin_logf(l[i]);
                }
            }
        }
    };
    parallel_for(ctx, items, 1, body);
}

inline void combine(const kiln_host_ctx* ctx, const CombineParams& p) {
    auto body = [&](i64 b, i64 e) {
        for (i64 r = b; r < e; ++r) {
            const int t = static_cast<int>(r / p.heads);
            const int pieces = (p.token_pos[t] + p.split_keys) / p.split_keys;
            if (pieces < 2) continue;
            const float* lse = p.part_lse + r * p.splits;
            float mx = lse[0];
            for (int i = 1; i < pieces; ++i) mx = lse[i] > mx ? lse[i] : mx;
            float w[64];
            float sum = 0.f;
            for (int i = 0; i < pieces; ++i) {
                w[i] = __builtin_expf(lse[i] - mx);
                sum += w[i];
            }
            const float inv = 1.0f / sum;
            u16* o = p.out + r * p.d_c;
            for (int c = 0; c < p.d_c; ++c) {
                float acc = 0.f;
                for (int i = 0; i < pieces; ++i) acc += w[i] * p.part_o[(r * p.splits + i) * p.d_c + c];
                o[c] = f32_to_bf16(acc * inv);
            }
        }
    };
    parallel_for(ctx, static_cast<i64>(p.num_tokens) * p.heads, 16, body);
}

}  // namespace kiln_host::mla
