#include "model/forward/memory_layout.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::forward {

namespace {
uint64_t round256(uint64_t b) { return (b + 255) / 256 * 256; }
}  // namespace

MemoryLayout memory_layout(const ModelConfig& c, int page_size, int kda_heads) {
    if (page_size < 1) throw InvalidArgument(fmt::format("page size {} must be at least 1", page_size));
    MemoryLayout m;
    m.kda_heads = kda_heads > 0 ? kda_heads : c.kda.num_heads;
    m.kda_head_dim = c.kda.head_dim;
    m.conv_size = c.kda.conv_size;
    m.cache_dim = c.mla.cache_dim();
    m.page_size = page_size;
    uint64_t off = 0;
    for (int l = 0; l < c.num_layers; ++l) {
        if (!c.is_kda(l)) continue;
        m.kda_state_offset.push_back(off);
        off += round256(m.recurrent_bytes());
        m.kda_conv_offset.push_back(off);
        off += round256(m.conv_bytes());
    }
    m.slot_bytes = off;
    off = 0;
    for (int l = 0; l < c.num_layers; ++l) {
        if (!c.is_mla(l)) continue;
        m.mla_offset.push_back(off);
        off += round256(m.mla_layer_bytes());
    }
    m.page_bytes = off;
    return m;
}

}  // namespace kiln::model::forward
