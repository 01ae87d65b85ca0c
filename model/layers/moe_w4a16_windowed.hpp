// The moe_w4a16 layers of one shape as a server runs them: one MoeW4A16 per M-window of the tune DB
// (autotune/tuned_tables.hpp; the heuristics' single window without DB entries), each holding the calls of
// its window with that window's tuning and kernels. layer(tokens) is a scan of a few integers (no SQLite,
// no strings): the first window whose last M holds the call. Every kernel is loaded at construction, so
// with a prebuilt cache from `kiln cache build` over the same DB and max_tokens nothing compiles.
#pragma once

#include <memory>
#include <vector>

#include "autotune/tuned_tables.hpp"
#include "model/layers/moe_w4a16.hpp"

namespace kiln::model::layers {

class MoeW4A16Windowed {
public:
    // shape.max_tokens: the largest call. Throws as MoeW4A16 does, or for a DB config the layer rejects.
    MoeW4A16Windowed(jit::Dispatcher& disp, runtime::Backend& backend, const weights::PreparedMoeWeights& gate_up,
                     const weights::PreparedMoeWeights& down, const MoeW4A16Shape& shape,
                     const autotune::TunedTables& tables);

    // The layer for a call of `tokens` tokens (0 <= tokens <= max_tokens; InvalidArgument otherwise).
    MoeW4A16& layer(int tokens) {
        for (size_t i = 0; i < m_hi_.size(); ++i)
            if (tokens <= m_hi_[i] && tokens >= 0) return *layers_[i];
        return out_of_range(tokens);
    }
    size_t windows() const { return layers_.size(); }
    bool tuned() const { return tuned_; }
    const autotune::ShapeKey& key() const { return key_; }

private:
    [[noreturn]] MoeW4A16& out_of_range(int tokens) const;
    std::vector<int64_t> m_hi_;
    std::vector<std::unique_ptr<MoeW4A16>> layers_;
    autotune::ShapeKey key_;
    bool tuned_ = false;
};

// The tune DB's key of a layer with these weights and shape.
autotune::ShapeKey moe_w4a16_key(const weights::PreparedMoeWeights& gate_up, const MoeW4A16Shape& shape);

}  // namespace kiln::model::layers
