#include "model/reference/latent_moe.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::reference {

void MlpWeights::validate(size_t d_in, size_t inter, const char* what) const {
    require_shape(gate, inter, d_in, fmt::format("{} gate_proj", what));
    require_shape(up, inter, d_in, fmt::format("{} up_proj", what));
    require_shape(down, d_in, inter, fmt::format("{} down_proj", what));
}

Matrix glu_mlp(const MlpWeights& w, const GluActivation& act, const Matrix& x) {
    Matrix g = linear(w.gate, x);
    Matrix u = linear(w.up, x);
    glu(act, g.data.data(), u.data.data(), g.data.size(), g.data.data());
    return linear(w.down, g);
}

Routing route(const RouterWeights& w, const RouterConfig& cfg, const Matrix& h) {
    const size_t E = cfg.num_experts, k = cfg.top_k;
    if (k == 0 || k > E) throw InvalidArgument(fmt::format("router: top_k {} with {} experts", k, E));
    Routing r;
    r.top_k = k;
    r.ids.resize(h.rows * k);
    r.weights.resize(h.rows * k);
    Matrix logits = linear(w.gate, h);
    std::vector<float> s(E), choice(E);
    std::vector<int32_t> order(E);
    for (size_t t = 0; t < h.rows; ++t) {
        for (size_t e = 0; e < E; ++e) {
            s[e] = sigmoid(logits.at(t, e));
            choice[e] = w.score_bias.empty() ? s[e] : s[e] + w.score_bias[e];  // selection only
        }
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + long(k), order.end(), [&](int32_t a, int32_t b) {
            return choice[a] != choice[b] ? choice[a] > choice[b] : a < b;
        });
        double sum = 0;
        for (size_t j = 0; j < k; ++j) sum += s[order[j]];
        for (size_t j = 0; j < k; ++j) {
            double g = s[order[j]];  // the unbiased score
            if (cfg.renormalize) g /= (sum + 1e-20);
            r.ids[t * k + j] = order[j];
            r.weights[t * k + j] = static_cast<float>(g * cfg.routed_scaling_factor);
        }
    }
    return r;
}

Matrix routed_experts(std::span<const ExpertWeights> experts, const GluActivation& act, const Matrix& z,
                      std::span<const int32_t> ids, std::span<const float> weights, size_t top_k) {
    if (ids.size() != z.rows * top_k || weights.size() != z.rows * top_k)
        throw InvalidArgument(fmt::format("routed_experts: {} tokens × top_k {} needs that many ids and weights", z.rows, top_k));
    Matrix out(z.rows, z.cols);
    std::vector<double> acc(z.cols);
    for (size_t t = 0; t < z.rows; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t j = 0; j < top_k; ++j) {
            int32_t e = ids[t * top_k + j];
            if (e < 0 || size_t(e) >= experts.size())
                throw InvalidArgument(fmt::format("routed_experts: expert id {} out of range [0, {})", e, experts.size()));
            const ExpertWeights& x = experts[size_t(e)];
            const size_t I = x.w1.rows;
            std::vector<float> g(I), u(I), y(z.cols);
            matvec(x.w1, z.row(t), g.data());
            matvec(x.w3, z.row(t), u.data());
            glu(act, g.data(), u.data(), I, g.data());
            matvec(x.w2, g.data(), y.data());
            for (size_t c = 0; c < z.cols; ++c) acc[c] += double(weights[t * top_k + j]) * y[c];
        }
        for (size_t c = 0; c < z.cols; ++c) out.at(t, c) = static_cast<float>(acc[c]);
    }
    return out;
}

void LatentMoeWeights::validate(const LatentMoeDims& d) const {
    require_shape(router.gate, d.router.num_experts, d.hidden, "moe gate");
    if (!router.score_bias.empty() && router.score_bias.size() != d.router.num_experts)
        throw InvalidArgument("moe e_score_correction_bias: wrong length");
    if (d.latent) {
        require_shape(down_proj, d.latent, d.hidden, "moe routed_expert_down_proj");
        require_shape(up_proj, d.hidden, d.latent, "moe routed_expert_up_proj");
    }
    if (d.latent_norm && latent_norm.size() != d.expert_in()) throw InvalidArgument("moe routed_expert_norm: wrong length");
    if (experts.size() != d.router.num_experts)
        throw InvalidArgument(fmt::format("moe: {} experts loaded, config says {}", experts.size(), d.router.num_experts));
    for (size_t e = 0; e < experts.size(); ++e) {
        require_shape(experts[e].w1, d.expert_inter, d.expert_in(), fmt::format("moe expert {} w1", e));
        require_shape(experts[e].w3, d.expert_inter, d.expert_in(), fmt::format("moe expert {} w3", e));
        require_shape(experts[e].w2, d.expert_in(), d.expert_inter, fmt::format("moe expert {} w2", e));
    }
    if (d.shared_inter) shared.validate(d.hidden, d.shared_inter, "moe shared_experts");
}

Matrix latent_moe_forward(const LatentMoeWeights& w, const LatentMoeDims& d, const Matrix& h) {
    Routing r = route(w.router, d.router, h);
    Matrix z = d.latent ? linear(w.down_proj, h) : h;
    Matrix y = routed_experts(w.experts, d.act, z, r.ids, r.weights, r.top_k);
    if (d.latent_norm)
        for (size_t t = 0; t < y.rows; ++t) rmsnorm(y.row(t), w.latent_norm.data(), y.cols, d.norm_eps, y.row(t));
    Matrix out = d.latent ? linear(w.up_proj, y) : std::move(y);
    if (d.shared_inter) {
        Matrix s = glu_mlp(w.shared, d.act, h);
        for (size_t i = 0; i < out.data.size(); ++i) out.data[i] += s.data[i];
    }
    return out;
}

}  // namespace kiln::model::reference
