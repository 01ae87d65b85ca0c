// What the MLA families share (jit/families/mla_*.hpp): the target check, the canonical skeleton, the dims the
// attention kernels bake in, and the shared-memory arithmetic of templates/device/mla_attention.cuh (mirrored
// here so a descriptor can be sized without compiling it).
//
// The families, one kernel entry point each:
//   mla_cache_append  each new token's (ĉ, k_rope) row into its page slot
//   mla_absorb        per-head products with kv_b: q̃ = W_UKᵀ q_nope (mode q), o = W_UV ō (mode out, gate)
//   mla_decode        absorbed attention over the paged latent, one token per CTA, context in pieces
//   mla_prefill       the same for prefill chunks, a block of a sequence's tokens per CTA (causal)
//   mla_combine       merges the pieces of tokens with more than one
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "jit/descriptor.hpp"

namespace kiln::jit::mla {

constexpr int k_attn_threads = 256;
constexpr int k_attn_warps = 8;
constexpr int k_key_tile = 32;
constexpr int k_piece_align = 64;   // split_keys is a multiple of this
constexpr int k_max_pieces = 64;    // pieces per token (the combine's weights)
constexpr int k_max_latent = 1024;  // d_c, d_n, d_v the kernels accept
constexpr int k_max_rope = 256;
constexpr uint32_t k_smem_limit = 232448;  // 227 KB of dynamic shared memory per CTA (sm_90)

// The descriptor skeleton of `family` in `mode` for `target`.
KernelDescriptor base_descriptor(std::string_view family, std::string_view mode, Target target);
// Checks the mode against `modes` and the target (host, or a device of compute capability 8.0 or newer:
// cp.async and bf16 arithmetic); throws InvalidArgument naming the problem. Returns the skeleton.
KernelDescriptor canonical_start(std::string_view family, const KernelDescriptor& in,
                                 std::initializer_list<std::string_view> modes);
// The attention dims: n = d_c (a multiple of 64, at most 1024), k = d_r (a multiple of 8, at most 256).
void take_attention_dims(std::string_view family, const KernelDescriptor& in, KernelDescriptor& d);
// Dynamic shared memory of an attention CTA of `rows` query rows (templates/device/mla_attention.cuh).
uint32_t attention_smem(int d_c, int d_r, int rows);
// The tensor-core version (templates/device/mla_attention_mma.cuh): 32 rows, 64-key tiles.
constexpr int k_mma_rows = 32;
uint32_t attention_mma_smem(int d_c, int d_r);

}  // namespace kiln::jit::mla
