// Attention Residuals (k3-model.md §4.2), the reference form. Token-local; for a sequence every row is
// mixed independently.
//   AttnRes(P, B; w, γ): candidates V = [B_0, …, B_{n-1}, P];
//     s_i = Σ_c (V_i[c] / sqrt(mean(V_i²) + eps)) · γ[c] · w[c]
//     return Σ_i softmax(s)_i · V_i          (the RAW candidates are mixed; the norm only scores)
// ResidualStream runs the per-layer bookkeeping of §4.2: the layer input is mixed from the banked blocks
// and the partial sum P; at every layer l with l % block_size == 0 the raw P is banked and a new partial
// sum starts; the FFN input is mixed again after the mixer output is added; the model output is a third
// mix. With no block size it is the plain pre-norm residual h ← h + f(norm(h)).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "model/reference/tensor_ops.hpp"

namespace kiln::model::reference {

struct AttnResSite {
    std::vector<float> proj;   // w  [d]   (*_res_proj.weight [1, d])
    std::vector<float> norm;   // γ  [d]   (*_res_norm.weight)
};

// Mixes `count` candidate vectors of width d into out (out must not alias a candidate).
void attn_res_mix(const float* const* candidates, size_t count, size_t d, const AttnResSite& site, float eps,
                  float* out);

class ResidualStream {
public:
    // block_size nullopt: plain residual.
    ResidualStream(Matrix embedding, std::optional<size_t> block_size, float eps);

    // The input of layer l's token mixer (before its input RMSNorm); banks P when l starts a block.
    Matrix mixer_input(size_t layer, const AttnResSite& site);
    // Adds the mixer output and returns the FFN input (before its post-attention RMSNorm).
    Matrix ffn_input(const Matrix& mixer_out, const AttnResSite& site);
    // Adds the FFN output.
    void add_ffn(const Matrix& ffn_out);
    // The final hidden state (before the final RMSNorm).
    Matrix output(const AttnResSite& site) const;

    size_t banked_blocks() const { return blocks_.size(); }

private:
    Matrix mix(const AttnResSite& site) const;  // AttnRes(P, blocks_)
    void add(const Matrix& m);

    std::optional<size_t> block_size_;
    float eps_;
    std::vector<Matrix> blocks_;
    Matrix partial_;        // P
    bool partial_empty_ = false;
};

}  // namespace kiln::model::reference
