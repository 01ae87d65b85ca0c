// moe_w4a16 decode GEMM (indexed mode, sm_90): swapped operands, dequantised weights on MMA-M and
// tokens on MMA-N (mma.sync m16n8k16), m-blocks of 8 * kTiles routed rows.
//
// One persistent CTA per SM, 512 threads = 4 groups x 4 warps. The work is the list of 16-row
// row-blocks over all m-blocks (num_mblocks * N_pad / 16, read from device memory); each CTA takes
// an equal contiguous share, so every SM streams the same number of weight bytes. Inside a CTA the
// share is cut into items of 64 rows (one layout super-block of one m-block); the four groups take
// items round-robin and each warp owns one 16-row block of an item over the whole K. A group runs
// its items as one flat sequence of 64-wide K steps through a kStages-deep cp.async pipeline: a
// lane copies its own 16 weight bytes per step, the group copies the step's token tile (gathered
// rows, zero-filled padding) once and its warps share it through ldmatrix. Token tiles after the
// first are skipped when the m-block has fewer rows (semi-static tiling).
//
// kMode 0 (gate_up): weights are the gate/up rows interleaved per 8 (layout built with
//   gate_up = true), the epilogue applies the GLU in fp32 and stores bf16 rows of the intermediate
//   [rows, inter_stride], one row per sorted position.
// kMode 1 (down): x is that intermediate; the epilogue multiplies by the router weight and adds into
//   the fp32 accumulator acc [M, acc_stride] (zero between calls). The last warp to finish a 16-column
//   slice (per-slice counters) writes the bf16 output for all tokens, zeroes the slice of acc and
//   resets its counter, so a call leaves acc and the counters as it found them.
#pragma once

#include "moe_w4a16_common.cuh"

namespace kiln_dev {
namespace moe {

struct DecodeParams {
    const u8* weights;      // record base of expert 0
    u64 expert_stride;      // bytes per expert
    const __nv_bfloat16* x; // gate_up: activations [M, x_stride]; down: intermediate [rows, x_stride]
    i32 x_stride;           // elements
    i32 k_real;             // gate_up with kMaskK: columns of x that exist
    i32 n_pad;              // rows of the weight matrix in the layout (multiple of 64)
    i32 n_real;             // down: output columns
    const i32* num_mblocks;
    const int2* mblock_info;
    const i32* sorted_token;
    const float* sorted_weight;
    i32 num_tokens;
    __nv_bfloat16* inter;   // gate_up output
    i32 inter_stride;
    float* acc;             // down: fp32 accumulator [M, acc_stride]
    i32 acc_stride;
    __nv_bfloat16* out;     // down: bf16 output [M, out_stride]
    i32 out_stride;
    i32* counters;          // down: [n_pad / 16], zero between calls
};

constexpr int kDecodeThreads = 512;

template <int kFormat, int kTiles>
struct DecodeSmem {
    static constexpr int kScaleBytes = LayoutBytes<kFormat>::kScaleBytesPerBlock;
    static constexpr int kOffScale = 2048;
    static constexpr int kOffX = kOffScale + 4 * kScaleBytes;
    static constexpr int kOffMeta = kOffX + 1024 * kTiles;
    static constexpr int kStage = ((kOffMeta + 16) + 127) / 128 * 128;
};

template <int kFormat, int kTiles, int kStages>
constexpr int decode_smem_bytes() {
    return 4 * kStages * DecodeSmem<kFormat, kTiles>::kStage;
}

template <int kFormat, bool kWideScale, int kMode, int kAct, int kKPad, bool kMaskK, int kTiles, int kStages>
__global__ void __launch_bounds__(kDecodeThreads, 1) moe_w4a16_decode(const DecodeParams p) {
    static_assert(kKPad % 64 == 0, "K must be padded to 64");
    static_assert(kTiles >= 1 && kTiles <= 4, "1..4 token tiles of 8");
    static_assert(kStages >= 2, "at least two stages");
    using SM = DecodeSmem<kFormat, kTiles>;
    constexpr int kQ = kKPad / 64;
    constexpr int kBM = 8 * kTiles;
    constexpr int kRec = LayoutBytes<kFormat>::kRecordBytes;
    constexpr int kScB = SM::kScaleBytes;
    constexpr int kChunks = 64 * kTiles;                 // 16-byte x chunks per stage
    constexpr int kCpt = (kChunks + 127) / 128;          // per thread

    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int gid = warp >> 2, wig = warp & 3, tg = tid & 127;
    const int g = lane >> 2, t = lane & 3;

    const int nmb = *p.num_mblocks;
    if (nmb == 0) {
        if constexpr (kMode == 1) {
            const int total = p.num_tokens * p.n_real;
            for (int i = blockIdx.x * kDecodeThreads + tid; i < total; i += gridDim.x * kDecodeThreads)
                p.out[(i / p.n_real) * p.out_stride + i % p.n_real] = __float2bfloat16(0.0f);
        }
        return;
    }
    const int nb16 = p.n_pad >> 4, nb64 = p.n_pad >> 6;
    const long long units = static_cast<long long>(nmb) * nb16;
    const int r0 = static_cast<int>(units * blockIdx.x / gridDim.x);
    const int r1 = static_cast<int>(units * (blockIdx.x + 1) / gridDim.x);
    if (r0 >= r1) return;
    const int gs0 = (r0 / nb16) * nb64 + (r0 % nb16) / 4;
    const int gs1 = ((r1 - 1) / nb16) * nb64 + ((r1 - 1) % nb16) / 4 + 1;
    const int n_items = gs1 - gs0;
    const int my_items = n_items > gid ? (n_items - gid + 3) / 4 : 0;
    const int steps = my_items * kQ;
    if (steps == 0) return;

    const u32 gsm = smem_addr(smem_raw) + gid * kStages * SM::kStage;
    const u64 policy = evict_first_policy();

    // ---- producer state: the item whose stages are being issued, and the next one ----
    struct Item {
        int mb, sb, mask, expert, valid;
        int tok[kCpt];
    };
    auto make_item = [&](int j) {
        Item it;
        const int G = gs0 + gid + 4 * j;
        it.mb = G / nb64;
        it.sb = G - it.mb * nb64;
        const int rbase = it.mb * nb16 + 4 * it.sb;
        it.mask = 0;
#pragma unroll
        for (int w = 0; w < 4; ++w)
            if (rbase + w >= r0 && rbase + w < r1) it.mask |= 1 << w;
        const int2 info = __ldg(p.mblock_info + it.mb);
        it.expert = info.x;
        it.valid = info.y;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            it.tok[h] = -1;
            if constexpr (kMode == 0) {
                const int row = (tg + 128 * h) >> 3;
                if (row < kBM) it.tok[h] = __ldg(p.sorted_token + it.mb * kBM + row);
            }
        }
        return it;
    };

    Item cur = make_item(0);
    Item nxt = cur;
    if (my_items > 1) nxt = make_item(1);
    int pj = 0, pq = 0;

    auto produce = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        if (tg == 0) {
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + SM::kOffMeta), "r"(cur.mb),
                         "r"(cur.valid), "r"(cur.mask), "r"(0)
                         : "memory");
        }
        if ((cur.mask >> wig) & 1) {
            const u8* rec = p.weights + static_cast<u64>(cur.expert) * p.expert_stride +
                            static_cast<u64>(cur.sb * kQ + pq) * kRec;
            cp_async16_stream(st + wig * 512 + lane * 16, rec + wig * 512 + lane * 16, policy);
            if (lane < kScB / 16)
                cp_async16(st + SM::kOffScale + wig * kScB + lane * 16, rec + 2048 + wig * kScB + lane * 16, 16);
        }
        const int ntiles = (cur.valid + 7) >> 3;
#pragma unroll
        for (int h = 0; h < kCpt; ++h) {
            const int c = tg + 128 * h;
            const int row = c >> 3;
            if (c < kChunks && (row >> 3) < ntiles) {
                const int kc = c & 7;
                const int k = pq * 64 + kc * 8;
                const __nv_bfloat16* src = p.x;
                int bytes = 0;
                if constexpr (kMode == 0) {
                    if (cur.tok[h] >= 0 && (!kMaskK || k < p.k_real)) {
                        src = p.x + static_cast<long long>(cur.tok[h]) * p.x_stride + k;
                        bytes = 16;
                    }
                } else {
                    if (row < cur.valid) {
                        src = p.x + static_cast<long long>(cur.mb * kBM + row) * p.x_stride + k;
                        bytes = 16;
                    }
                }
                const int rr = row & 7;
                cp_async16(st + SM::kOffX + (row >> 3) * 1024 + rr * 128 + ((kc ^ rr) << 4), src, bytes);
            }
        }
        if (++pq == kQ) {
            pq = 0;
            ++pj;
            cur = nxt;
            if (pj + 1 < my_items) nxt = make_item(pj + 1);
        }
    };

    // ---- consumer state ----
    float acc[kTiles][4];
    int c_mb = 0, c_valid = 0, c_ntiles = 0, c_sb = 0;
    bool c_active = false;
    int c_q = 0, c_j = 0;
    int e_tok[kTiles][2];
    float e_wt[kTiles][2];

    auto consume = [&](int slot) {
        const u32 st = gsm + slot * SM::kStage;
        if (c_q == 0) {
            const uint4 meta = lds128(st + SM::kOffMeta);
            c_mb = static_cast<int>(meta.x);
            c_valid = static_cast<int>(meta.y);
            c_active = (meta.z >> wig) & 1u;
            c_ntiles = (c_valid + 7) >> 3;
            c_sb = (gs0 + gid + 4 * c_j) - c_mb * nb64;
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
                if constexpr (kMode == 1) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int pos = c_mb * kBM + 8 * i + 2 * t + e;
                        e_tok[i][e] = __ldg(p.sorted_token + pos);
                        e_wt[i][e] = __ldg(p.sorted_weight + pos);
                    }
                }
            }
        }
        if (c_active) {
            const uint4 wv = lds128(st + wig * 512 + lane * 16);
            uint2 sv;
            if constexpr (kFormat == kFormatInt4) {
                sv = lds64(st + SM::kOffScale + wig * kScB + g * 8);
            } else {
                sv.x = lds32(st + SM::kOffScale + wig * kScB + g * 4);
                sv.y = 0;
            }
            u32 m[4];
            expand_scales<kFormat, kWideScale>(sv, m);

            u32 b[kTiles][8];
            const int lrow = lane & 7, lmat = lane >> 3;
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                if (i == 0 || i < c_ntiles) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int kc = 4 * c + lmat;
                        ldmatrix_x4(st + SM::kOffX + i * 1024 + lrow * 128 + ((kc ^ lrow) << 4), b[i][4 * c + 0],
                                    b[i][4 * c + 1], b[i][4 * c + 2], b[i][4 * c + 3]);
                    }
                }
            }
            const u32 words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                u32 a[4];
                dequant_word<kFormat, kWideScale>(words[s], m[(s >> 1) * 2], m[(s >> 1) * 2 + 1], a);
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
                    if (i == 0 || i < c_ntiles) mma_bf16_16816(acc[i], a[0], a[1], a[2], a[3], b[i][2 * s], b[i][2 * s + 1]);
                }
            }
        }
        if (c_q == kQ - 1 && c_active) {
            const int rb = 4 * c_sb + wig;
            if constexpr (kMode == 0) {
                const int col = rb * 8 + g;
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = 8 * i + 2 * t + e;
                        if (r < c_valid) {
                            const float h = glu<kAct>(acc[i][e], acc[i][2 + e]);
                            p.inter[static_cast<long long>(c_mb * kBM + r) * p.inter_stride + col] = __float2bfloat16(h);
                        }
                    }
                }
            } else {
                const int n0 = rb * 16 + g;
#pragma unroll
                for (int i = 0; i < kTiles; ++i) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = 8 * i + 2 * t + e;
                        if (r < c_valid) {
                            float* dst = p.acc + static_cast<long long>(e_tok[i][e]) * p.acc_stride;
                            const float wt = e_wt[i][e];
                            if (n0 < p.n_real) red_add_f32(dst + n0, wt * acc[i][e]);
                            if (n0 + 8 < p.n_real) red_add_f32(dst + n0 + 8, wt * acc[i][2 + e]);
                        }
                    }
                }
                // Last of the num_mblocks contributions to this 16-column slice converts it.
                __threadfence();
                __syncwarp();
                int prev = 0;
                if (lane == 0) prev = atomicAdd(p.counters + rb, 1);
                prev = __shfl_sync(0xffffffffu, prev, 0);
                if (prev == nmb - 1) {
                    __threadfence();
                    const int c0 = rb * 16;
                    for (int mtok = lane; mtok < p.num_tokens; mtok += 32) {
                        float* arow = p.acc + static_cast<long long>(mtok) * p.acc_stride + c0;
                        __nv_bfloat16* orow = p.out + static_cast<long long>(mtok) * p.out_stride + c0;
                        float v[16];
#pragma unroll
                        for (int q4 = 0; q4 < 4; ++q4) {
                            const float4 f = ldcg_f4(arow + 4 * q4);
                            v[4 * q4 + 0] = f.x;
                            v[4 * q4 + 1] = f.y;
                            v[4 * q4 + 2] = f.z;
                            v[4 * q4 + 3] = f.w;
                        }
#pragma unroll
                        for (int q4 = 0; q4 < 4; ++q4)
                            reinterpret_cast<float4*>(arow)[q4] = make_float4(0.f, 0.f, 0.f, 0.f);
                        if (c0 + 16 <= p.n_real) {
                            uint4 o0, o1;
                            o0.x = pack_bf16x2(v[0], v[1]);
                            o0.y = pack_bf16x2(v[2], v[3]);
                            o0.z = pack_bf16x2(v[4], v[5]);
                            o0.w = pack_bf16x2(v[6], v[7]);
                            o1.x = pack_bf16x2(v[8], v[9]);
                            o1.y = pack_bf16x2(v[10], v[11]);
                            o1.z = pack_bf16x2(v[12], v[13]);
                            o1.w = pack_bf16x2(v[14], v[15]);
                            reinterpret_cast<uint4*>(orow)[0] = o0;
                            reinterpret_cast<uint4*>(orow)[1] = o1;
                        } else {
#pragma unroll
                            for (int c = 0; c < 16; ++c)
                                if (c0 + c < p.n_real) orow[c] = __float2bfloat16(v[c]);
                        }
                    }
                    if (lane == 0) p.counters[rb] = 0;
                }
            }
        }
        if (++c_q == kQ) {
            c_q = 0;
            ++c_j;
        }
    };

    // ---- pipeline ----
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < steps) produce(s);
        cp_async_commit();
    }
    int slot_c = 0, slot_p = kStages - 1;
    for (int i = 0; i < steps; ++i) {
        cp_async_wait<kStages - 2>();
        named_barrier(1 + gid, 128);
        if (i + kStages - 1 < steps) produce(slot_p);
        cp_async_commit();
        consume(slot_c);
        slot_c = slot_c + 1 == kStages ? 0 : slot_c + 1;
        slot_p = slot_p + 1 == kStages ? 0 : slot_p + 1;
    }
    cp_async_wait<0>();
}

}  // namespace moe
}  // namespace kiln_dev
