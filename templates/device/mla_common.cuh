// What the MLA device kernels share: the address of a cache row in the paged arena, and the sequence
// selector of the attention launches (templates/common/mla_attention_params.h).
#pragma once

#include "device/prelude.cuh"
#include "common/step_index_params.h"

namespace kiln_dev {
namespace mla {

// Row j (a position) of sequence s in this layer's part of the paged cache: page page_table[s][j / page_size]
// at arena_base + arena_bytes - (page + 1) x page_bytes, row j % page_size of cache_dim bf16 values.
__device__ __forceinline__ const char* cache_row(const kiln_params::StepIndex& x, u64 layer_offset, int row_bytes,
                                                 int s, int j) {
    const int page = __ldg(x.page_table + static_cast<long long>(s) * x.max_pages + j / x.page_size);
    const u64 addr = x.arena_base + x.arena_bytes - static_cast<u64>(page + 1) * x.page_bytes + layer_offset +
                     static_cast<u64>(j % x.page_size) * static_cast<u64>(row_bytes);
    return reinterpret_cast<const char*>(addr);
}

__device__ __forceinline__ bool serves(const kiln_params::StepIndex& x, int only, int s) {
    const int n = __ldg(x.cu_seqlens + s + 1) - __ldg(x.cu_seqlens + s);
    return only == 0 || (only == 1 ? n == 1 : n > 1);
}

}  // namespace mla
}  // namespace kiln_dev
