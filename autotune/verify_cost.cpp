#include "autotune/verify_cost.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::autotune {

namespace {

void check_axis(std::span<const int> v, const char* what) {
    if (v.empty()) throw InvalidArgument(fmt::format("verify_cost: no {}", what));
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < 1) throw InvalidArgument(fmt::format("verify_cost: {} {} is not positive", what, v[i]));
        if (i > 0 && v[i] <= v[i - 1]) throw InvalidArgument(fmt::format("verify_cost: {} are not ascending", what));
    }
}

size_t covering(const std::vector<int>& axis, int v) {
    auto it = std::lower_bound(axis.begin(), axis.end(), v);
    return it == axis.end() ? axis.size() - 1 : static_cast<size_t>(it - axis.begin());
}

}  // namespace

double VerifyCostTable::cost(int r, int t) const {
    if (requests.empty() || tokens.empty() || ms.size() != requests.size() * tokens.size())
        throw InvalidArgument("verify_cost: the table is empty");
    if (r < 1 || t < 1) throw InvalidArgument(fmt::format("verify_cost: cost({}, {}) of nothing", r, t));
    return at(covering(requests, r), covering(tokens, t));
}

void force_monotone(VerifyCostTable& t) {
    const size_t R = t.requests.size(), C = t.tokens.size();
    if (t.measured_ms.size() != R * C)
        throw InvalidArgument(fmt::format("verify_cost: {} values for a {} x {} table", t.measured_ms.size(), R, C));
    t.ms = t.measured_ms;
    for (size_t r = 0; r < R; ++r)
        for (size_t c = 0; c < C; ++c) {
            double& v = t.ms[r * C + c];
            if (r > 0) v = std::max(v, t.ms[(r - 1) * C + c]);
            if (c > 0) v = std::max(v, t.ms[r * C + c - 1]);
        }
}

std::vector<CostShelf> shelves(const VerifyCostTable& t, double flat) {
    std::vector<CostShelf> out;
    const size_t C = t.tokens.size();
    for (size_t r = 0; r < t.requests.size(); ++r) {
        size_t first = 0;
        for (size_t c = 1; c <= C; ++c) {
            if (c < C && t.at(r, c) <= t.at(r, first) * (1.0 + flat)) continue;
            out.push_back({t.requests[r], t.tokens[first], t.tokens[c - 1], t.at(r, first)});
            first = c;
        }
    }
    return out;
}

VerifyCostTable measure_verify_cost(std::span<const int> requests, std::span<const int> tokens, const StepTimer& timer,
                                    int reps, int warmup) {
    check_axis(requests, "request counts");
    check_axis(tokens, "token counts");
    if (reps < 1) throw InvalidArgument(fmt::format("verify_cost: reps={} (at least 1)", reps));
    if (warmup < 0) throw InvalidArgument(fmt::format("verify_cost: warmup={} is negative", warmup));
    if (!timer) throw InvalidArgument("verify_cost: no step timer");
    VerifyCostTable t;
    t.requests.assign(requests.begin(), requests.end());
    t.tokens.assign(tokens.begin(), tokens.end());
    t.measured_ms.reserve(requests.size() * tokens.size());
    std::vector<double> v(static_cast<size_t>(reps));
    for (int r : requests)
        for (int k : tokens) {
            for (int i = 0; i < warmup; ++i) timer(r, k);
            for (int i = 0; i < reps; ++i) {
                v[i] = timer(r, k);
                if (!std::isfinite(v[i]) || v[i] < 0)
                    throw InvalidArgument(fmt::format("verify_cost: the step timer returned {} ms for {} x {}", v[i], r, k));
            }
            std::nth_element(v.begin(), v.begin() + reps / 2, v.end());
            t.measured_ms.push_back(v[reps / 2]);
        }
    force_monotone(t);
    return t;
}

}  // namespace kiln::autotune
