#include "model/reference/situ.hpp"

#include <cmath>

#include "model/reference/tensor_ops.hpp"

namespace kiln::model::reference {

float situ(float gate, float up, float beta, std::optional<float> linear_beta) {
    double g = gate, u = up, b = beta;
    double sig = 1.0 / (1.0 + std::exp(-g));
    double gate_part = b * std::tanh(g / b) * sig;
    double up_part = linear_beta ? double(*linear_beta) * std::tanh(u / double(*linear_beta)) : u;
    return static_cast<float>(gate_part * up_part);
}

void glu(const GluActivation& act, const float* gate, const float* up, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) {
        if (act.kind == GluActivation::Kind::situ)
            out[i] = situ(gate[i], up[i], act.beta, act.linear_beta);
        else
            out[i] = static_cast<float>(double(silu(gate[i])) * double(up[i]));
    }
}

}  // namespace kiln::model::reference
