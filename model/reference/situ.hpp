// GLU activations of the K3 family (k3-model.md §6), elementwise over [gate | up] pairs in fp32:
//   SiTU(g, u) = [β·tanh(g/β)·sigmoid(g)] · [β_lin·tanh(u/β_lin)]   (K3: β = 4, β_lin = 25)
//   SiLU-GLU(g, u) = g·sigmoid(g) · u                              (Kimi-Linear-48B, hidden_act "silu")
// A missing β_lin (linear_beta = None) leaves the up branch uncapped.
#pragma once

#include <cstddef>
#include <optional>

namespace kiln::model::reference {

struct GluActivation {
    enum class Kind { situ, silu };
    Kind kind = Kind::situ;
    float beta = 4.0f;                       // SiTU gate cap
    std::optional<float> linear_beta = 25.0f;  // SiTU up cap; nullopt = none

    static GluActivation situ(float beta = 4.0f, std::optional<float> linear_beta = 25.0f) {
        return {Kind::situ, beta, linear_beta};
    }
    static GluActivation silu() { return {Kind::silu, 0.0f, std::nullopt}; }
};

float situ(float gate, float up, float beta, std::optional<float> linear_beta);

// out[i] = act(gate[i], up[i]) for i < n. out may alias gate or up.
void glu(const GluActivation& act, const float* gate, const float* up, size_t n, float* out);

}  // namespace kiln::model::reference
