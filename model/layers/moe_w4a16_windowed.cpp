#include "model/layers/moe_w4a16_windowed.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::layers {

autotune::ShapeKey moe_w4a16_key(const weights::PreparedMoeWeights& gate_up, const MoeW4A16Shape& shape) {
    return autotune::moe_w4a16_shape_key(gate_up.k, gate_up.n, gate_up.experts, shape.topk, gate_up.format,
                                         jit::moe::k_act_names[static_cast<int>(shape.act)], shape.ep_size);
}

MoeW4A16Windowed::MoeW4A16Windowed(jit::Dispatcher& disp, runtime::Backend& backend,
                                   const weights::PreparedMoeWeights& gate_up, const weights::PreparedMoeWeights& down,
                                   const MoeW4A16Shape& shape, const autotune::TunedTables& tables)
    : key_(moe_w4a16_key(gate_up, shape)) {
    for (const autotune::MoeW4A16Window& w : autotune::moe_w4a16_windows(tables, key_, gate_up.format, shape.max_tokens)) {
        MoeW4A16Shape s = shape;
        s.max_tokens = w.max_tokens;
        layers_.push_back(std::make_unique<MoeW4A16>(disp, backend, gate_up, down, s, w.tuning));
        m_hi_.push_back(w.m_hi);
        tuned_ = tuned_ || w.tuned;
    }
}

MoeW4A16& MoeW4A16Windowed::out_of_range(int tokens) const {
    throw InvalidArgument(fmt::format("moe_w4a16: {} tokens, the layers hold 0..{}", tokens, m_hi_.empty() ? 0 : m_hi_.back()));
}

}  // namespace kiln::model::layers
