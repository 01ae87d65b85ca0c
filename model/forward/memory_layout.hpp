// Where a model's recurrent state and KV live in the backend's arena (model/forward/batch.hpp: state slot i at
// byte i x slot_bytes from the arena's start, KV page j at byte (j + 1) x page_bytes from its end). Every KDA
// and MLA kernel addresses its layer's part through this struct, so the layers, the forward and the engine agree.
//
//   state slot  for each KDA layer, in layer order:  recurrent state  fp32 [H, K, V]  (key-major: S[h][k][v])
//                                                     conv state       bf16 [3][conv - 1][H x K]  (q, k, v: the
//                                                                      last conv - 1 projected inputs, oldest first)
//   KV page     for each MLA layer, in layer order:  page_size tokens x cache_dim bf16, token-major: the
//                                                     kv_lora_rank normed latent, then the qk_rope_head_dim raw tail
// H counts the heads this rank holds (all of them without tensor parallelism). Sizes round up to 256 bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace kiln::model::forward {

struct MemoryLayout {
    int kda_heads = 0, kda_head_dim = 0, conv_size = 0;
    int cache_dim = 0;      // MLA values per token (kv_lora_rank + qk_rope_head_dim)
    int page_size = 1;      // tokens per KV page
    uint64_t slot_bytes = 0, page_bytes = 0;
    std::vector<uint64_t> kda_state_offset;  // per KDA layer (in KDA-layer order): its recurrent state in a slot
    std::vector<uint64_t> kda_conv_offset;   // per KDA layer: its conv state in a slot
    std::vector<uint64_t> mla_offset;        // per MLA layer (in MLA-layer order): its tokens in a page

    uint64_t recurrent_bytes() const { return uint64_t(kda_heads) * kda_head_dim * kda_head_dim * 4; }
    uint64_t conv_bytes() const { return uint64_t(3) * (conv_size - 1) * kda_heads * kda_head_dim * 2; }
    uint64_t mla_layer_bytes() const { return uint64_t(page_size) * cache_dim * 2; }

    // An arena of `arena_bytes` at `base`: the start of slot i, and of page j.
    static uint64_t slot_addr(uint64_t base, uint64_t slot_bytes, int32_t slot) { return base + uint64_t(slot) * slot_bytes; }
    static uint64_t page_addr(uint64_t base, uint64_t arena_bytes, uint64_t page_bytes, int32_t page) {
        return base + arena_bytes - uint64_t(page + 1) * page_bytes;
    }
};

// The layout of `config` with `kda_heads` KDA heads on this rank (0: all) and `page_size` tokens per page.
MemoryLayout memory_layout(const ModelConfig& config, int page_size, int kda_heads = 0);

}  // namespace kiln::model::forward
