#include "model/reference/kda.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::model::reference {

namespace {

void require_len(const std::vector<float>& v, size_t n, const char* what) {
    if (v.size() != n) throw InvalidArgument(fmt::format("{}: expected [{}], got [{}]", what, n, v.size()));
}

// Causal depthwise conv over u [T, C] continuing from `state` [kernel-1, C]; returns SiLU(conv(u)) and
// leaves the last kernel-1 projected inputs in `state`.
Matrix causal_conv_silu(const Matrix& u, const Matrix& weight, Matrix& state) {
    const size_t taps = weight.cols, C = u.cols, T = u.rows, hist = taps - 1;
    // Row r of `full` is state row r for r < hist, then u row r - hist.
    auto full_row = [&](size_t r) -> const float* { return r < hist ? state.row(r) : u.row(r - hist); };
    Matrix y(T, C);
    for (size_t t = 0; t < T; ++t) {
        for (size_t c = 0; c < C; ++c) {
            double acc = 0;
            for (size_t j = 0; j < taps; ++j) acc += double(weight.at(c, j)) * full_row(t + j)[c];
            y.at(t, c) = silu(static_cast<float>(acc));
        }
    }
    Matrix next(hist, C);
    for (size_t r = 0; r < hist; ++r) {
        const float* src = full_row(T + r);
        std::copy(src, src + C, next.row(r));
    }
    state = std::move(next);
    return y;
}

}  // namespace

void KdaWeights::validate(const KdaDims& d) const {
    const size_t W = d.width();
    require_shape(q_proj, W, d.hidden, "kda q_proj");
    require_shape(k_proj, W, d.hidden, "kda k_proj");
    require_shape(v_proj, W, d.hidden, "kda v_proj");
    require_shape(q_conv, W, d.conv_kernel, "kda q_conv1d");
    require_shape(k_conv, W, d.conv_kernel, "kda k_conv1d");
    require_shape(v_conv, W, d.conv_kernel, "kda v_conv1d");
    require_shape(f_a, f_a.rows, d.hidden, "kda f_a_proj");
    require_shape(f_b, W, f_a.rows, "kda f_b_proj");
    require_len(dt_bias, W, "kda dt_bias");
    if (A_log.size() < d.heads)
        throw InvalidArgument(fmt::format("kda A_log: needs at least {} (one per head), got {}", d.heads, A_log.size()));
    require_shape(b_proj, d.heads, d.hidden, "kda b_proj");
    if (d.full_rank_gate) {
        require_shape(g_proj, W, d.hidden, "kda g_proj");
    } else {
        require_shape(g_a, g_a.rows, d.hidden, "kda g_a_proj");
        require_shape(g_b, W, g_a.rows, "kda g_b_proj");
    }
    require_len(o_norm, d.head_dim, "kda o_norm");
    require_shape(o_proj, d.hidden, W, "kda o_proj");
    if (d.conv_kernel < 1) throw InvalidArgument("kda: conv kernel must be at least 1");
}

KdaState KdaState::zeros(const KdaDims& d) {
    KdaState s;
    for (auto& c : s.conv) c = Matrix(d.conv_kernel - 1, d.width());
    s.S.assign(d.heads * d.head_dim * d.head_dim, 0.0f);
    return s;
}

float kda_gate(float z, float a_log_h, std::optional<float> lower_bound) {
    double a = std::exp(double(a_log_h));
    if (lower_bound) return static_cast<float>(double(*lower_bound) * double(sigmoid(static_cast<float>(a * z))));
    return static_cast<float>(-a * double(softplus(z)));
}

Matrix delta_rule_recurrent(const DeltaRuleInputs& in, float* S) {
    const size_t T = in.q.rows, K = in.k.cols, V = in.v.cols;
    Matrix o(T, V);
    std::vector<double> acc(V);
    for (size_t t = 0; t < T; ++t) {
        const float* q = in.q.row(t);
        const float* k = in.k.row(t);
        const float* v = in.v.row(t);
        const float* g = in.g.row(t);
        // S' = Diag(α) S
        for (size_t c = 0; c < K; ++c) {
            float alpha = std::exp(g[c]);
            for (size_t j = 0; j < V; ++j) S[c * V + j] *= alpha;
        }
        // δ = β (v − S'ᵀ k);  S += k δᵀ
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t c = 0; c < K; ++c)
            for (size_t j = 0; j < V; ++j) acc[j] += double(S[c * V + j]) * k[c];
        std::vector<float> delta(V);
        for (size_t j = 0; j < V; ++j) delta[j] = static_cast<float>(double(in.beta[t]) * (double(v[j]) - acc[j]));
        for (size_t c = 0; c < K; ++c)
            for (size_t j = 0; j < V; ++j) S[c * V + j] = static_cast<float>(S[c * V + j] + double(k[c]) * delta[j]);
        // o = Sᵀ q
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t c = 0; c < K; ++c)
            for (size_t j = 0; j < V; ++j) acc[j] += double(S[c * V + j]) * q[c];
        for (size_t j = 0; j < V; ++j) o.at(t, j) = static_cast<float>(acc[j]);
    }
    return o;
}

Matrix delta_rule_chunked(const DeltaRuleInputs& in, float* S, size_t chunk_size) {
    const size_t T = in.q.rows, K = in.k.cols, V = in.v.cols;
    if (chunk_size == 0) throw InvalidArgument("kda: chunk size must be positive");
    Matrix o(T, V);
    for (size_t c0 = 0; c0 < T; c0 += chunk_size) {
        const size_t n = std::min(chunk_size, T - c0);
        auto q = [&](size_t r) { return in.q.row(c0 + r); };
        auto k = [&](size_t r) { return in.k.row(c0 + r); };
        auto v = [&](size_t r) { return in.v.row(c0 + r); };
        auto beta = [&](size_t r) { return double(in.beta[c0 + r]); };

        // 1. Γ_r = Σ_{i≤r} g_i (fp32, as the kernels keep it).
        Matrix G(n, K);
        for (size_t r = 0; r < n; ++r)
            for (size_t c = 0; c < K; ++c) G.at(r, c) = (r ? G.at(r - 1, c) : 0.0f) + in.g.at(c0 + r, c);
        // exp(Γ_r − Γ_i) for i ≤ r: always on the difference (≤ 0), never exp(Γ_r)·exp(−Γ_i).
        auto decayed_dot = [&](const float* a, size_t r, const float* b, size_t i) {
            double s = 0;
            for (size_t c = 0; c < K; ++c) s += double(a[c]) * b[c] * std::exp(G.at(r, c) - G.at(i, c));
            return s;
        };

        // 2. A[r,i] = β_r Σ_c k_r k_i exp(Γ_r − Γ_i), strictly lower.
        Matrix A(n, n);
        for (size_t r = 0; r < n; ++r)
            for (size_t i = 0; i < r; ++i) A.at(r, i) = static_cast<float>(beta(r) * decayed_dot(k(r), r, k(i), i));

        // 3. T = (I + A)⁻¹ Diag(β), row by row: T_r = β_r e_r − Σ_{i<r} A[r,i] T_i.
        Matrix Tm(n, n);
        for (size_t r = 0; r < n; ++r) {
            for (size_t col = 0; col < r; ++col) {
                double s = 0;
                for (size_t i = col; i < r; ++i) s += double(A.at(r, i)) * Tm.at(i, col);
                Tm.at(r, col) = static_cast<float>(-s);
            }
            Tm.at(r, r) = static_cast<float>(beta(r));
        }
        //    W = T (exp(Γ) ⊙ K),  U = T V
        Matrix Wm(n, K), U(n, V);
        for (size_t r = 0; r < n; ++r) {
            for (size_t c = 0; c < K; ++c) {
                double s = 0;
                for (size_t i = 0; i <= r; ++i) s += double(Tm.at(r, i)) * std::exp(G.at(i, c)) * k(i)[c];
                Wm.at(r, c) = static_cast<float>(s);
            }
            for (size_t j = 0; j < V; ++j) {
                double s = 0;
                for (size_t i = 0; i <= r; ++i) s += double(Tm.at(r, i)) * v(i)[j];
                U.at(r, j) = static_cast<float>(s);
            }
        }

        // 4. Pseudo-values V_new = U − W S (S = state entering the chunk).
        Matrix Vn(n, V);
        for (size_t r = 0; r < n; ++r)
            for (size_t j = 0; j < V; ++j) {
                double s = U.at(r, j);
                for (size_t c = 0; c < K; ++c) s -= double(Wm.at(r, c)) * S[c * V + j];
                Vn.at(r, j) = static_cast<float>(s);
            }

        // 5. O_r = (q_r ⊙ exp(Γ_r)) S + Σ_{i≤r} Aqk[r,i] V_new_i.
        for (size_t r = 0; r < n; ++r) {
            std::vector<double> acc(V, 0.0);
            for (size_t c = 0; c < K; ++c) {
                double qc = double(q(r)[c]) * std::exp(G.at(r, c));
                for (size_t j = 0; j < V; ++j) acc[j] += qc * S[c * V + j];
            }
            for (size_t i = 0; i <= r; ++i) {
                double a = static_cast<float>(decayed_dot(q(r), r, k(i), i));
                for (size_t j = 0; j < V; ++j) acc[j] += a * Vn.at(i, j);
            }
            for (size_t j = 0; j < V; ++j) o.at(c0 + r, j) = static_cast<float>(acc[j]);
        }

        // State pass: S ← Diag(exp(Γ_n)) S + Σ_r (exp(Γ_n − Γ_r) ⊙ k_r) V_new_rᵀ.
        const size_t last = n - 1;
        std::vector<double> row(V);
        for (size_t c = 0; c < K; ++c) {
            double decay_all = std::exp(G.at(last, c));
            for (size_t j = 0; j < V; ++j) row[j] = decay_all * S[c * V + j];
            for (size_t r = 0; r < n; ++r) {
                double kd = double(std::exp(G.at(last, c) - G.at(r, c))) * k(r)[c];
                for (size_t j = 0; j < V; ++j) row[j] += kd * Vn.at(r, j);
            }
            for (size_t j = 0; j < V; ++j) S[c * V + j] = static_cast<float>(row[j]);
        }
    }
    return o;
}

Matrix kda_forward(const KdaWeights& w, const KdaDims& d, KdaState& state, const Matrix& x, KdaMode mode) {
    const size_t T = x.rows, H = d.heads, K = d.head_dim, Wd = d.width();
    if (x.cols != d.hidden) throw InvalidArgument(fmt::format("kda: input width {} != hidden {}", x.cols, d.hidden));

    // Projections and the causal conv; the conv states advance here.
    Matrix q = causal_conv_silu(linear(w.q_proj, x), w.q_conv, state.conv[0]);
    Matrix k = causal_conv_silu(linear(w.k_proj, x), w.k_conv, state.conv[1]);
    Matrix v = causal_conv_silu(linear(w.v_proj, x), w.v_conv, state.conv[2]);
    Matrix b = linear(w.b_proj, x);                       // [T, H]
    Matrix z = linear(w.f_b, linear(w.f_a, x));           // [T, H·K]
    Matrix gate = d.full_rank_gate ? linear(w.g_proj, x) : linear(w.g_b, linear(w.g_a, x));

    const float q_scale = static_cast<float>(1.0 / std::sqrt(double(K)));
    Matrix out(T, Wd);
    for (size_t h = 0; h < H; ++h) {
        DeltaRuleInputs in{Matrix(T, K), Matrix(T, K), Matrix(T, K), Matrix(T, K), std::vector<float>(T)};
        for (size_t t = 0; t < T; ++t) {
            float* qh = in.q.row(t);
            float* kh = in.k.row(t);
            std::copy_n(q.row(t) + h * K, K, qh);
            std::copy_n(k.row(t) + h * K, K, kh);
            std::copy_n(v.row(t) + h * K, K, in.v.row(t));
            l2norm_inplace(qh, K, kKdaL2NormEps);
            l2norm_inplace(kh, K, kKdaL2NormEps);
            for (size_t c = 0; c < K; ++c) qh[c] *= q_scale;
            in.beta[t] = sigmoid(b.at(t, h));
            for (size_t c = 0; c < K; ++c) {
                float zc = z.at(t, h * K + c) + w.dt_bias[h * K + c];
                in.g.at(t, c) = kda_gate(zc, w.A_log[h], d.gate_lower_bound);  // per head: A_log[h]
            }
        }
        float* Sh = state.S.data() + h * K * K;
        Matrix oh = mode == KdaMode::chunked ? delta_rule_chunked(in, Sh, d.chunk_size) : delta_rule_recurrent(in, Sh);
        // Gated RMSNorm: norm, then ⊙ o_norm ⊙ sigmoid(gate).
        for (size_t t = 0; t < T; ++t) {
            float* dst = out.row(t) + h * K;
            rmsnorm(oh.row(t), w.o_norm.data(), K, d.norm_eps, dst);
            for (size_t c = 0; c < K; ++c) dst[c] = static_cast<float>(double(dst[c]) * sigmoid(gate.at(t, h * K + c)));
        }
    }
    return linear(w.o_proj, out);
}

}  // namespace kiln::model::reference
