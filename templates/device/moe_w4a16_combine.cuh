// moe_w4a16 top-k combine (indexed mode): out[t, :] = sum over t's local slots j of rows[pos(t, j), :],
// where rows are the router-weighted bf16 outputs of the down GEMM in its rows mode (one row per sorted
// position) and pos comes from the routing kernel (slot_pos, -1 for slots of other ranks). row_tile > 0:
// down wrote its rows in tiles of row_tile positions x 64 columns instead (the warp-specialised prefill
// down of block_m 128 / 192 sends each tile with one bulk copy), 16-byte chunks swizzled within a row;
// rows_tiled_offset below is the layout. Sums in fp32 in slot order (deterministic), one bf16 rounding;
// a token with no local slot gets a zero row. Work items are (token, 1024 columns), grid-stride, 8
// columns per thread, up to eight slots' loads in flight.
#pragma once

#include <cuda_bf16.h>

#include "device/prelude.cuh"
#include "common/moe_w4a16_combine_params.h"

namespace kiln_dev {
namespace moe {

using kiln_params::moe::CombineParams;

// Tiled rows (row_tile T, a multiple of 8; n_pad = rows_stride, a multiple of 64): element (pos, c) of the
// rows lies in tile (pos / T, c / 64), T rows of 64 columns, with chunk c / 8 % 8 of row r = pos % T at
// chunk (c / 8 % 8) ^ (r % 8) of that row. The host combine reads the same layout.
__host__ __device__ __forceinline__ long long rows_tiled_offset(int pos, int c, int row_tile, int n_pad) {
    const int mb = pos / row_tile, r = pos - mb * row_tile;
    return (static_cast<long long>(mb) * (n_pad >> 6) + (c >> 6)) * row_tile * 64 + r * 64 +
           ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

constexpr int kCombineThreads = 128;
constexpr int kCombineCols = kCombineThreads * 8;  // columns of one work item (8 per thread)

// Work items of a call: (token, block of kCombineCols columns); the host sizes the grid from this.
__host__ __device__ constexpr long long combine_items(int num_tokens, int n) {
    return static_cast<long long>(num_tokens) * ((n + kCombineCols - 1) / kCombineCols);
}

__global__ void __launch_bounds__(kCombineThreads) moe_w4a16_combine(const CombineParams p) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");  // may overlap the down kernel's tail (sm_90)
    const bool vec = (p.n % 8) == 0 && (p.rows_stride % 8) == 0 && (p.out_stride % 8) == 0;
    const int cb = (p.n + kCombineCols - 1) / kCombineCols;
    const long long items = combine_items(p.num_tokens, p.n);
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        const int tok = static_cast<int>(item / cb);
        const int c0 = static_cast<int>(item % cb) * kCombineCols;
        const i32* pos = p.slot_pos + static_cast<long long>(tok) * p.topk;
        __nv_bfloat16* orow = p.out + static_cast<long long>(tok) * p.out_stride;
        if (vec) {
            const int c = c0 + threadIdx.x * 8;
            if (c >= p.n) continue;
            float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            // Eight slots' rows in flight at a time, summed in slot order (deterministic).
            for (int j0 = 0; j0 < p.topk; j0 += 8) {
                int r[8];
                uint4 v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    r[u] = j0 + u < p.topk ? __ldg(pos + j0 + u) : -1;
                }
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    if (r[u] >= 0) {
                        const long long o = p.row_tile ? rows_tiled_offset(r[u], c, p.row_tile, p.rows_stride)
                                                       : static_cast<long long>(r[u]) * p.rows_stride + c;
                        v[u] = __ldg(reinterpret_cast<const uint4*>(p.rows + o));
                    }
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    if (r[u] < 0) continue;
                    const u32 w[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&w[q]);
                        const float2 f = __bfloat1622float2(b);
                        acc[2 * q] += f.x;
                        acc[2 * q + 1] += f.y;
                    }
                }
            }
            u32 o[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const __nv_bfloat162 b = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
                o[q] = *reinterpret_cast<const u32*>(&b);
            }
            *reinterpret_cast<uint4*>(orow + c) = make_uint4(o[0], o[1], o[2], o[3]);
        } else {
            const int c1 = min(p.n, c0 + kCombineCols);
            for (int c = c0 + threadIdx.x; c < c1; c += kCombineThreads) {
                float acc = 0.f;
                for (int j = 0; j < p.topk; ++j) {
                    const int r = __ldg(pos + j);
                    if (r < 0) continue;
                    const long long o = p.row_tile ? rows_tiled_offset(r, c, p.row_tile, p.rows_stride)
                                                   : static_cast<long long>(r) * p.rows_stride + c;
                    acc += __bfloat162float(p.rows[o]);
                }
                orow[c] = __float2bfloat16(acc);
            }
        }
    }
}

}  // namespace moe
}  // namespace kiln_dev
