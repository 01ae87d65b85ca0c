// Helpers shared by the KDA device kernels (templates/device/kda_*.cuh).
#pragma once

#include "device/prelude.cuh"
#include "common/step_index_params.h"

namespace kiln_dev {
namespace kda {

using kiln_params::StepIndex;

constexpr int kChunk = 64;     // chunk of the chunkwise form; snapshots sit at its multiples
constexpr int kConvHist = 3;   // conv 4: the state holds the last three projected inputs

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

template <typename T>
__device__ __forceinline__ T* slot_ptr(const StepIndex& x, int slot, u64 offset) {
    return reinterpret_cast<T*>(x.arena_base + static_cast<u64>(slot) * x.slot_bytes + offset);
}

// The sequence holding work tile `tile` when every sequence's new tokens are cut into tiles of `tile_len`
// (sequence by sequence, in order), and the tile's index within it; seq = -1 past the last tile. Called by
// a whole warp (all lanes get the same answer).
__device__ __forceinline__ void find_tile(const StepIndex& x, int tile, int tile_len, int& seq, int& tile_in_seq) {
    const int lane = threadIdx.x & 31;
    int before = 0;  // tiles of the sequences already passed
    seq = -1;
    tile_in_seq = 0;
    for (int base = 0; base < x.num_seqs; base += 32) {
        const int s = base + lane;
        const int n = s < x.num_seqs ? x.cu_seqlens[s + 1] - x.cu_seqlens[s] : 0;
        int incl = (n + tile_len - 1) / tile_len;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += u;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, before + incl > tile);
        if (hit) {
            const int first = __ffs(hit) - 1;
            const int incl_first = __shfl_sync(0xffffffffu, incl, first);
            const int n_first = __shfl_sync(0xffffffffu, n, first);
            seq = base + first;
            tile_in_seq = tile - (before + incl_first - (n_first + tile_len - 1) / tile_len);
            return;
        }
        before += __shfl_sync(0xffffffffu, incl, 31);
    }
}

}  // namespace kda
}  // namespace kiln_dev
