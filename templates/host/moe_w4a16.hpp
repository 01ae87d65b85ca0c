// moe_w4a16 on the host target: routing prep, gate_up with the GLU, down with the router weights and
// the per-token combine, and the dequantiser, with the contracts of templates/device/moe_w4a16_*.cuh
// (same parameter blocks, same buffers, same results up to fp32 summation order).
//
// Weights are read in the decode_mma16 layout (model/weights/moe_w4a16.hpp; the byte order is
// documented in templates/device/moe_w4a16_common.cuh): 128-row super-blocks of 8 row-blocks x 64-input
// records, each lane of a row-block holding four words of m16n8k16 A fragments, scales behind the
// weights. A 16 x 64 tile is decoded to exact bf16 values in fp32 (INT4: bf16((code - 8) * scale);
// MXFP4: e2m1 * 2^(s - 127), exact), products with bf16 activations are exact in fp32 and summed in fp32.
//
//   gate_up  one work item per (m-block, row-block): 16 layout rows = 8 gate rows and their 8 up rows,
//            over K, for the m-block's valid rows; GLU in fp32, bf16 rows of the intermediate.
//   down     one work item per row-block (16 output columns) over all m-blocks, so no two threads add
//            to the same accumulator column: acc[token][n] += weight * dot, then every token's columns
//            go out as bf16 and acc is zeroed again (the contract: acc is zero between calls; the
//            counters are the device's and are not touched).
//   down rows (kMode 2) one work item per (m-block, row-block): the router-weighted bf16 row of every
//            sorted position, summed per token by `combine` (slot order, fp32, one rounding).
//   routing  per-expert rows in m-blocks of kBlockM (stable: rows of an expert in slot order), and
//            optionally each slot's sorted row.
// The dynamic-schedule fields of DecodeParams (work, split_*, k_chunk, order_window) are not read.
//   dequant  one expert matrix to bf16 [n_pad, k_pad] in layout row order.
#pragma once

#include "host/prelude.hpp"
#include "common/moe_w4a16_combine_params.h"
#include "common/moe_w4a16_decode_params.h"
#include "common/moe_w4a16_dequant_params.h"
#include "common/moe_w4a16_route_params.h"

namespace kiln_host {
namespace moe {

enum : int { kFormatInt4 = 0, kFormatMxfp4 = 1 };
enum : int { kActSiluGlu = 0, kActSituGlu = 1 };

using I32x2 = kiln_params::i32x2;
using kiln_params::moe::CombineParams;
using kiln_params::moe::DecodeParams;
using kiln_params::moe::DequantParams;
using kiln_params::moe::RoutingParams;

constexpr int kBlocks = 8;  // row-blocks per super-block (decode_mma16)

template <int kFormat>
struct Record {
    static constexpr int kScaleBytesPerBlock = kFormat == kFormatInt4 ? 64 : 32;
    static constexpr int kWeightBytes = kBlocks * 512;
    static constexpr int kBytes = kBlocks * (512 + kScaleBytesPerBlock);
};

inline u32 load_u32(const u8* p) {
    u32 v;
    __builtin_memcpy(&v, p, 4);
    return v;
}

inline float bits_f32(u32 u) {
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

// fp32 -> nearest-even bf16, kept as fp32.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// 2^(s - 127) for an E8M0 byte (s = 0: the subnormal 2^-127).
inline float e8m0(u32 s) { return s ? bits_f32(s << 23) : bits_f32(0x00400000u); }

// E2M1 magnitude codes 0..7.
constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Row-block `blk` of one record -> w[row][k] (16 rows x 64 inputs), exact bf16 values.

// MXFP4 fields of element m of a layout word (the placement of templates/device/moe_w4a16_common.cuh),
// read from x = the word for the low element or the word rotated right by 16 for the high one:
// E2M1 magnitude e1 e0 m0 and sign.
template <class T>
inline T mxfp4_mag(T x, int m) {
    switch (m) {
        case 0: return (x >> 6) & 7u;
        case 1: return (x >> 2) & 7u;
        case 2: return (x >> 28) & 7u;
        default: return (x & 1u) | ((x >> 24) & 6u);
    }
}
template <class T>
inline T mxfp4_sign(T x, int m) {
    return (x >> (m == 0 ? 15 : m == 1 ? 11 : m == 2 ? 5 : 1)) & 1u;
}
// The word as seen by element half h (0: low, 1: high).
inline u32 mxfp4_half_view(u32 word, int h) { return h ? (word >> 16) | (word << 16) : word; }
template <int kFormat>
inline void decode_block(const u8* rec, int blk, float (&w)[16][64]) {
    const u8* wb = rec + blk * 512;
    const u8* sb = rec + Record<kFormat>::kWeightBytes + blk * Record<kFormat>::kScaleBytesPerBlock;
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        float sc[4];  // [row g grp 0, row g+8 grp 0, row g grp 1, row g+8 grp 1]
        if constexpr (kFormat == kFormatInt4) {
            for (int i = 0; i < 4; ++i) {
                u16 b;
                __builtin_memcpy(&b, sb + g * 8 + 2 * i, 2);
                sc[i] = bf16_to_f32(b);
            }
        } else {
            for (int i = 0; i < 4; ++i) sc[i] = e8m0(sb[g * 4 + i]);
        }
        for (int s = 0; s < 4; ++s) {
            const u32 word = load_u32(wb + lane * 16 + s * 4);
            const int grp = s >> 1;
            for (int m = 0; m < 4; ++m) {
                const int row = g + 8 * (m & 1);
                const int k = 16 * s + 2 * t + 8 * (m >> 1);
                const float scale = sc[2 * grp + (m & 1)];
                for (int half = 0; half < 2; ++half) {
                    float v;
                    if constexpr (kFormat == kFormatInt4) {
                        const int code = static_cast<int>((word >> (16 * half + 4 * m)) & 0xfu);
                        v = round_bf16(static_cast<float>(code - 8) * scale);
                    } else {
                        const u32 bits = mxfp4_half_view(word, half);
                        const float mag = kE2M1[mxfp4_mag(bits, m)];
                        v = (mxfp4_sign(bits, m) ? -mag : mag) * scale;
                    }
                    w[row][k + half] = v;
                }
            }
        }
    }
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

template <int kAct>
inline float glu(float gate, float up) {
    if constexpr (kAct == kActSiluGlu) {
        return gate * sigmoid_f(gate) * up;
    } else {
        // SiTU-GLU, beta = 4, beta_lin = 25.
        return (4.0f * __builtin_tanhf(gate * 0.25f) * sigmoid_f(gate)) * (25.0f * __builtin_tanhf(up * 0.04f));
    }
}

// The GEMMs work in fragment order, 8 floats per vector (clang vector extension; the backend picks the
// host's widest units). Lane (g, t) of a row-block holds 8 halves [s0h0 s0h1 s1h0 s1h1 s2h0 s2h1 s3h0 s3h1]
// (s = word, h = 16-bit half); value m (0..3) of a half belongs to layout row g + 8 (m & 1) and input
// 16 s + 2 t + 8 (m >> 1) + h, and its scale group is s >> 1: vector elements 0-3 use group 0, 4-7
// group 1. So one lane and one m decode to one vector, multiplied by a vector of the token's inputs
// permuted the same way; the row's sum is reduced once at the end of K.
typedef float f32x8 __attribute__((ext_vector_type(8)));
typedef u32 u32x8 __attribute__((ext_vector_type(8)));
typedef i32 i32x8 __attribute__((ext_vector_type(8)));

inline float hsum(f32x8 v) {
    const float a = (v.s0 + v.s4) + (v.s1 + v.s5), b = (v.s2 + v.s6) + (v.s3 + v.s7);
    return a + b;
}

// The 64 inputs of a record (bf16, zero at and past k_real) permuted for lane t and half-index mh = m >> 1:
// xp[t * 2 + mh][2 s + h] = x[16 s + 2 t + 8 mh + h].
inline void permute_x64(const u16* row, i64 k0, i64 k_real, f32x8 (&xp)[8]) {
    float xv[64];
    if (k0 + 64 <= k_real) {
        for (int i = 0; i < 64; ++i) xv[i] = bf16_to_f32(row[k0 + i]);
    } else {
        for (int i = 0; i < 64; ++i) xv[i] = k0 + i < k_real ? bf16_to_f32(row[k0 + i]) : 0.0f;
    }
    for (int t = 0; t < 4; ++t)
        for (int mh = 0; mh < 2; ++mh)
            for (int e = 0; e < 8; ++e) xp[t * 2 + mh][e] = xv[16 * (e >> 1) + 2 * t + 8 * mh + (e & 1)];
}

// Row-block `blk` of one record: decoded vectors dec[g][m][t] (exact bf16 values, as decode_block).
template <int kFormat>
inline void decode_vectors(const u8* rec, int blk, f32x8 (&dec)[8][4][4]) {
    const u8* wb = rec + blk * 512;
    const u8* sb = rec + Record<kFormat>::kWeightBytes + blk * Record<kFormat>::kScaleBytesPerBlock;
    for (int g = 0; g < 8; ++g) {
        f32x8 sc[2];  // parity 0 (row g), 1 (row g + 8)
        for (int par = 0; par < 2; ++par) {
            float s0, s1;
            if constexpr (kFormat == kFormatInt4) {
                u16 b0, b1;
                __builtin_memcpy(&b0, sb + g * 8 + 2 * par, 2);
                __builtin_memcpy(&b1, sb + g * 8 + 2 * (2 + par), 2);
                s0 = bf16_to_f32(b0);
                s1 = bf16_to_f32(b1);
            } else {
                s0 = e8m0(sb[g * 4 + par]);
                s1 = e8m0(sb[g * 4 + 2 + par]);
            }
            sc[par] = f32x8{s0, s0, s0, s0, s1, s1, s1, s1};
        }
        for (int t = 0; t < 4; ++t) {
            u32 words[4];
            __builtin_memcpy(words, wb + (4 * g + t) * 16, 16);
            u32x8 v;  // element e: word e / 2, half e % 2 (INT4: that half; MXFP4: the word as that half sees it)
            for (int e = 0; e < 8; ++e)
                v[e] = kFormat == kFormatInt4 ? (words[e >> 1] >> (16 * (e & 1))) & 0xffffu
                                              : mxfp4_half_view(words[e >> 1], e & 1);
            for (int m = 0; m < 4; ++m) {
                f32x8 val;
                if constexpr (kFormat == kFormatInt4) {
                    const i32x8 code = __builtin_convertvector((v >> (4 * m)) & 0xfu, i32x8) - 8;
                    const f32x8 prod = __builtin_convertvector(code, f32x8) * sc[m & 1];
                    u32x8 bits = __builtin_bit_cast(u32x8, prod);
                    bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;  // nearest-even bf16
                    val = __builtin_bit_cast(f32x8, bits);
                } else {
                    // E2M1 (e, m) -> fp32 bits: e > 0: 2^(e-1) (1 + m/2); e == 0: m / 2.
                    const u32x8 mag = mxfp4_mag(v, m);
                    const u32x8 ex = mag >> 1, mb = mag & 1u;
                    const u32x8 normal = ((ex + 126u) << 23) | (mb << 22);
                    const u32x8 sub = mb * 0x3f000000u;
                    const u32x8 is_normal = __builtin_convertvector(ex != 0u, u32x8);
                    const u32x8 bits = (normal & is_normal) | (sub & ~is_normal) | (mxfp4_sign(v, m) << 31);
                    val = __builtin_bit_cast(f32x8, bits) * sc[m & 1];
                }
                dec[g][m][t] = val;
            }
        }
    }
}

// kMode 0 = gate_up, 1 = down (combined per token), 2 = down rows. kNPad, kKPad: the weight matrix in the layout.
template <int kFormat, int kMode, int kAct, int kBM, int kNPad, int kKPad>
inline void gemm(const kiln_host_ctx* ctx, const DecodeParams& p) {
    static_assert(kNPad % (16 * kBlocks) == 0 && kKPad % 64 == 0, "layout geometry");
    constexpr int kQ = kKPad / 64;
    constexpr int kRowBlocks = kNPad / 16;
    constexpr i64 kRec = Record<kFormat>::kBytes;
    const int nmb = *p.num_mblocks;
    const i64 k_real = p.k_real;

    // One (m-block, row-block) pair: acc[r][row] for the m-block's valid rows and the 16 layout rows.
    auto accumulate = [&](int mb, int rb, float (&acc)[kBM][16]) -> int {
        const I32x2 info = p.mblock_info[mb];
        const int e = info.x, valid = min(info.y, kBM);
        if (valid <= 0) return 0;
        const u16* xrow[kBM];
        for (int r = 0; r < valid; ++r) {
            const i64 src = kMode == 0 ? p.sorted_token[mb * kBM + r] : static_cast<i64>(mb) * kBM + r;
            xrow[r] = p.x + src * p.x_stride;
        }
        const u8* base = p.weights + static_cast<u64>(e) * p.expert_stride + static_cast<u64>(rb / kBlocks) * kQ * kRec;
        f32x8 vacc[kBM][16];
        for (int r = 0; r < valid; ++r)
            for (int row = 0; row < 16; ++row) vacc[r][row] = 0.0f;
        f32x8 dec[8][4][4];
        f32x8 xp[8];
        for (int q = 0; q < kQ; ++q) {
            decode_vectors<kFormat>(base + q * kRec, rb % kBlocks, dec);
            for (int r = 0; r < valid; ++r) {
                permute_x64(xrow[r], static_cast<i64>(q) * 64, k_real, xp);
                for (int g = 0; g < 8; ++g)
                    for (int m = 0; m < 4; ++m) {
                        f32x8 a = vacc[r][g + 8 * (m & 1)];
                        for (int t = 0; t < 4; ++t) a += dec[g][m][t] * xp[t * 2 + (m >> 1)];
                        vacc[r][g + 8 * (m & 1)] = a;
                    }
            }
        }
        for (int r = 0; r < valid; ++r)
            for (int row = 0; row < 16; ++row) acc[r][row] = hsum(vacc[r][row]);
        return valid;
    };

    if constexpr (kMode == 0) {
        auto items = [&](i64 b, i64 e) {
            float acc[kBM][16];
            for (i64 it = b; it < e; ++it) {
                const int mb = static_cast<int>(it / kRowBlocks), rb = static_cast<int>(it % kRowBlocks);
                const int valid = accumulate(mb, rb, acc);
                for (int g = 0; g < 8; ++g) {
                    const i64 col = static_cast<i64>(rb) * 8 + g;
                    for (int r = 0; r < valid; ++r)
                        p.inter[(static_cast<i64>(mb) * kBM + r) * p.inter_stride + col] =
                            f32_to_bf16(glu<kAct>(acc[r][g], acc[r][g + 8]));
                }
            }
        };
        parallel_for(ctx, static_cast<i64>(nmb) * kRowBlocks, 0, items);
    } else if constexpr (kMode == 2) {
        auto items = [&](i64 b, i64 e) {
            float acc[kBM][16];
            for (i64 it = b; it < e; ++it) {
                const int mb = static_cast<int>(it / kRowBlocks), rb = static_cast<int>(it % kRowBlocks);
                const int valid = accumulate(mb, rb, acc);
                const i64 n0 = static_cast<i64>(rb) * 16;
                for (int r = 0; r < valid; ++r) {
                    const i64 slot = static_cast<i64>(mb) * kBM + r;
                    const float wt = p.sorted_weight[slot];
                    u16* o = p.out + slot * p.out_stride;
                    for (int row = 0; row < 16; ++row)
                        if (n0 + row < p.n_real) o[n0 + row] = f32_to_bf16(wt * acc[r][row]);
                }
            }
        };
        parallel_for(ctx, static_cast<i64>(nmb) * kRowBlocks, 0, items);
    } else {
        auto columns = [&](i64 b, i64 e) {
            float acc[kBM][16];
            for (i64 rb = b; rb < e; ++rb) {
                const i64 n0 = rb * 16;
                for (int mb = 0; mb < nmb; ++mb) {
                    const int valid = accumulate(mb, static_cast<int>(rb), acc);
                    for (int r = 0; r < valid; ++r) {
                        const i64 slot = static_cast<i64>(mb) * kBM + r;
                        float* dst = p.acc + static_cast<i64>(p.sorted_token[slot]) * p.acc_stride;
                        const float wt = p.sorted_weight[slot];
                        for (int row = 0; row < 16; ++row)
                            if (n0 + row < p.n_real) dst[n0 + row] += wt * acc[r][row];
                    }
                }
                for (i64 t = 0; t < p.num_tokens; ++t) {
                    float* a = p.acc + t * p.acc_stride;
                    u16* o = p.out + t * p.out_stride;
                    for (int row = 0; row < 16; ++row) {
                        const i64 n = n0 + row;
                        if (n < p.n_real) {
                            o[n] = f32_to_bf16(a[n]);
                            a[n] = 0.0f;
                        }
                    }
                }
            }
        };
        parallel_for(ctx, kRowBlocks, 0, columns);
    }
}

template <int kExperts, int kBlockM>
inline void routing(const kiln_host_ctx*, const RoutingParams& p) {
    static_assert(kExperts >= 1 && kExperts <= 4096, "1..4096 experts");
    i32 cnt[kExperts], off[kExperts];
    const i64 slots = static_cast<i64>(p.num_tokens) * p.topk;
    for (int e = 0; e < kExperts; ++e) cnt[e] = 0;
    for (i64 s = 0; s < slots; ++s) {
        const i32 e = p.topk_ids[s];
        if (static_cast<u32>(e) < static_cast<u32>(kExperts)) ++cnt[e];
    }
    i32 total = 0;
    for (int e = 0; e < kExperts; ++e) {
        off[e] = total;
        total += (cnt[e] + kBlockM - 1) / kBlockM;
    }
    if (total > p.mblock_cap) total = p.mblock_cap;
    for (int e = 0; e < kExperts; ++e) {
        const i32 c = cnt[e];
        p.expert_count[e] = c;
        const i32 nb = (c + kBlockM - 1) / kBlockM;
        for (i32 j = 0; j < nb; ++j) {
            const i32 mb = off[e] + j;
            if (mb < total) p.mblock_info[mb] = I32x2{e, c - j * kBlockM < kBlockM ? c - j * kBlockM : kBlockM};
        }
    }
    const i64 rows = static_cast<i64>(total) * kBlockM;
    for (i64 r = 0; r < rows; ++r) {
        p.sorted_token[r] = -1;
        p.sorted_weight[r] = 0.0f;
    }
    for (int e = 0; e < kExperts; ++e) cnt[e] = 0;
    for (i64 s = 0; s < slots; ++s) {
        const i32 e = p.topk_ids[s];
        i32 where = -1;
        if (static_cast<u32>(e) < static_cast<u32>(kExperts)) {
            const i64 r = static_cast<i64>(off[e]) * kBlockM + cnt[e]++;
            if (r < rows) {
                p.sorted_token[r] = static_cast<i32>(s / p.topk);
                p.sorted_weight[r] = p.topk_weights[s];
                where = static_cast<i32>(r);
            }
        }
        if (p.slot_pos) p.slot_pos[s] = where;
    }
    *p.num_mblocks = total;
}

// The tiled rows layout of the device combine (templates/device/moe_w4a16_combine.cuh): element (pos, c) in
// tile (pos / T, c / 64) of T x 64, chunk c / 8 % 8 of row r = pos % T stored at chunk (c / 8 % 8) ^ (r % 8).
inline i64 rows_tiled_offset(int pos, int c, int row_tile, int n_pad) {
    const int mb = pos / row_tile, r = pos - mb * row_tile;
    return (static_cast<i64>(mb) * (n_pad >> 6) + (c >> 6)) * row_tile * 64 + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) +
           (c & 7);
}

// out[t, :] = sum over t's slots j (in slot order) of rows[slot_pos[t, j], :] (where slot_pos[t, j] >= 0;
// tiled when row_tile > 0), fp32, one bf16 rounding.
inline void combine(const kiln_host_ctx* ctx, const CombineParams& p) {
    auto tokens = [&](i64 b, i64 e) {
        float acc[256];
        for (i64 t = b; t < e; ++t) {
            const i32* pos = p.slot_pos + t * p.topk;
            u16* o = p.out + t * p.out_stride;
            for (i64 c0 = 0; c0 < p.n; c0 += 256) {
                const int w = p.n - c0 < 256 ? static_cast<int>(p.n - c0) : 256;
                for (int c = 0; c < w; ++c) acc[c] = 0.0f;
                for (int j = 0; j < p.topk; ++j) {
                    const i32 r = pos[j];
                    if (r < 0) continue;
                    if (p.row_tile > 0) {
                        for (int c = 0; c < w; ++c)
                            acc[c] += bf16_to_f32(p.rows[rows_tiled_offset(r, static_cast<int>(c0) + c, p.row_tile, p.rows_stride)]);
                        continue;
                    }
                    const u16* row = p.rows + static_cast<i64>(r) * p.rows_stride + c0;
                    for (int c = 0; c < w; ++c) acc[c] += bf16_to_f32(row[c]);
                }
                for (int c = 0; c < w; ++c) o[c0 + c] = f32_to_bf16(acc[c]);
            }
        }
    };
    parallel_for(ctx, p.num_tokens, 0, tokens);
}

template <int kFormat, int kNPad, int kKPad>
inline void dequant(const kiln_host_ctx* ctx, const DequantParams& p) {
    constexpr int kQ = kKPad / 64;
    constexpr i64 kRec = Record<kFormat>::kBytes;
    auto blocks = [&](i64 b, i64 e) {
        float w[16][64];
        for (i64 rb = b; rb < e; ++rb) {
            const u8* base = p.weights + (rb / kBlocks) * kQ * kRec;
            for (int q = 0; q < kQ; ++q) {
                decode_block<kFormat>(base + q * kRec, static_cast<int>(rb % kBlocks), w);
                for (int row = 0; row < 16; ++row)
                    for (int k = 0; k < 64; ++k)
                        p.out[(rb * 16 + row) * static_cast<i64>(kKPad) + q * 64 + k] = f32_to_bf16(w[row][k]);
            }
        }
    };
    parallel_for(ctx, kNPad / 16, 0, blocks);
}

}  // namespace moe
}  // namespace kiln_host
