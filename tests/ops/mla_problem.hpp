// What the MLA op cases share (tests/ops/mla.cpp, mla_layer.cpp): a paged latent cache in an arena laid out
// as model/forward/memory_layout.hpp says (two MLA layers per page, the cases use the second, pages of the
// step's sequences scattered over the arena in a shuffled order), and the step index of a batch of sequences
// (cached tokens, new tokens) on the backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "model/forward/memory_layout.hpp"
#include "model/forward/step_index.hpp"
#include "tests/common/backends.hpp"
#include "tests/common/tensors.hpp"

namespace kiln::ops::mla_test {

namespace forward = model::forward;

struct SeqSpec {
    int start = 0;  // tokens already cached
    int tokens = 1; // new tokens this step
};

inline uint64_t round256(uint64_t b) { return (b + 255) / 256 * 256; }

// The arena image on the host: 0xFF (NaN) everywhere except the rows a case writes.
struct PagedCache {
    int page_size = 1, cache_dim = 0, layer = 1;
    forward::MemoryLayout layout;
    int num_pages = 0;
    uint64_t arena_bytes = 0;
    static constexpr uint64_t k_slot_region = 256;  // the arena's start (state slots; unused here)
    std::vector<std::vector<int32_t>> pages;        // per sequence, covering its final length
    std::vector<uint8_t> image;

    PagedCache(int page_size_, int cache_dim_, const std::vector<int>& lengths, uint64_t seed)
        : page_size(page_size_), cache_dim(cache_dim_) {
        layout.cache_dim = cache_dim;
        layout.page_size = page_size;
        const uint64_t per_layer = round256(uint64_t(page_size) * cache_dim * 2);
        layout.mla_offset = {0, per_layer};
        layout.page_bytes = 2 * per_layer;
        layout.slot_bytes = k_slot_region;
        for (int len : lengths) num_pages += (len + page_size - 1) / page_size;
        num_pages += 3;  // pages no sequence owns
        std::vector<int32_t> ids(static_cast<size_t>(num_pages));
        std::iota(ids.begin(), ids.end(), 0);
        std::mt19937 rng(static_cast<uint32_t>(seed));
        std::shuffle(ids.begin(), ids.end(), rng);
        size_t next = 0;
        for (int len : lengths) {
            std::vector<int32_t> p;
            for (int i = 0; i < (len + page_size - 1) / page_size; ++i) p.push_back(ids[next++]);
            pages.push_back(std::move(p));
        }
        arena_bytes = k_slot_region + uint64_t(num_pages) * layout.page_bytes;
        image.assign(arena_bytes, 0xFF);
    }
    size_t row_offset(int s, int j) const {
        const int page = pages[size_t(s)][size_t(j / page_size)];
        return arena_bytes - uint64_t(page + 1) * layout.page_bytes + layout.mla_offset[size_t(layer)] +
               uint64_t(j % page_size) * cache_dim * 2;
    }
    uint16_t* row(int s, int j) { return reinterpret_cast<uint16_t*>(image.data() + row_offset(s, j)); }
    const uint16_t* row(int s, int j) const {
        return reinterpret_cast<const uint16_t*>(image.data() + row_offset(s, j));
    }
};

// The step's index on the host and on the backend.
struct Step {
    forward::StepIndexHost host;
    forward::StepIndexStaging staging;
    kiln_params::StepIndex dev{};

    void build(const std::vector<SeqSpec>& seqs, const PagedCache& kv) {
        forward::ForwardBatch b;
        for (size_t s = 0; s < seqs.size(); ++s) {
            forward::SequenceStep q;
            q.start = seqs[s].start;
            q.tokens.assign(size_t(seqs[s].tokens), 1);
            q.slot = int32_t(s);
            q.pages = kv.pages[s];
            b.seqs.push_back(std::move(q));
        }
        forward::StepLimits lim;
        lim.num_slots = int32_t(seqs.size());
        lim.num_pages = kv.num_pages;
        lim.page_size = kv.page_size;
        host = forward::build_step_index(b, lim);
    }
    void upload(test::TestBackend& b, const runtime::Buffer& arena, const PagedCache& kv) {
        dev = staging.upload(host, arena.addr(), kv.arena_bytes, kv.layout.slot_bytes, kv.layout.page_bytes,
                             kv.page_size, *b.backend, *b.stream);
    }
};

inline jit::Target target_of(test::TestBackend& b) {
    return b.backend->kind() == runtime::BackendKind::host ? jit::Target::host_target() : b.disp->device_target();
}

}  // namespace kiln::ops::mla_test
