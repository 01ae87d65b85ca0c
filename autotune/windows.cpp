#include "autotune/windows.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::autotune {

std::string ShapeKey::text() const {
    return fmt::format("{}/{} n={} k={} e={} topk={}{}{}", family, mode, n, k, e, topk, variant.empty() ? "" : " ",
                       variant);
}

namespace {

struct Point {
    const Measurement* best = nullptr;                  // fastest at this M
    std::map<std::string, const Measurement*> by_config;
};

}  // namespace

std::vector<MWindow> fit_m_windows(std::span<const Measurement> ms, double tolerance, const BucketOf& bucket_of) {
    if (ms.empty()) throw InvalidArgument("fit_m_windows: no measurements");
    if (!(tolerance >= 0)) throw InvalidArgument(fmt::format("fit_m_windows: tolerance {} is negative", tolerance));
    const ShapeKey& shape = ms.front().shape;
    std::map<int64_t, Point> points;
    for (const Measurement& m : ms) {
        if (m.shape != shape)
            throw InvalidArgument(fmt::format("fit_m_windows: measurements of {} and {} mixed", shape.text(), m.shape.text()));
        if (m.m < 1) throw InvalidArgument(fmt::format("fit_m_windows: {} measured at M={}", shape.text(), m.m));
        Point& p = points[m.m];
        p.by_config[m.config] = &m;
        if (!p.best || m.median_us < p.best->median_us) p.best = &m;
    }
    // configs within tolerance of the fastest at each M
    auto near_best = [&](const Point& p) {
        std::set<std::string> s;
        const double limit = p.best->median_us * (1.0 + tolerance);
        for (const auto& [c, m] : p.by_config)
            if (m->median_us <= limit) s.insert(c);
        return s;
    };

    struct Span {
        std::vector<int64_t> ms;
        std::set<std::string> configs;
    };
    std::vector<Span> spans;
    for (const auto& [m, p] : points) {
        std::set<std::string> nb = near_best(p);
        if (!spans.empty()) {
            std::set<std::string> both;
            std::set_intersection(spans.back().configs.begin(), spans.back().configs.end(), nb.begin(), nb.end(),
                                  std::inserter(both, both.end()));
            if (!both.empty()) {
                spans.back().configs = std::move(both);
                spans.back().ms.push_back(m);
                continue;
            }
        }
        spans.push_back({{m}, std::move(nb)});
    }

    std::vector<MWindow> out;
    for (size_t i = 0; i < spans.size(); ++i) {
        const Span& s = spans[i];
        std::string pick;
        double pick_sum = std::numeric_limits<double>::infinity();
        for (const std::string& c : s.configs) {
            double sum = 0;
            for (int64_t m : s.ms) sum += points.at(m).by_config.at(c)->median_us;
            if (sum < pick_sum) pick_sum = sum, pick = c;
        }
        const Measurement* last = points.at(s.ms.back()).by_config.at(pick);
        MWindow w;
        w.shape = shape;
        w.m_lo = i == 0 ? 1 : s.ms.front();
        w.m_hi = i + 1 < spans.size() ? spans[i + 1].ms.front() - 1 : s.ms.back();
        w.config = pick;
        w.block_m = last->block_m;
        w.schedule = last->schedule;
        w.us = last->median_us;
        w.bucket = w.m_hi;
        if (bucket_of) w.bucket = bucket_of(w);
        out.push_back(std::move(w));
    }
    return out;
}

std::vector<TokeWindow> toke_windows(std::span<const MWindow> windows) {
    std::vector<TokeWindow> out;
    for (const MWindow& w : windows) {
        if (w.shape.e < 1 || w.shape.topk < 1)
            throw InvalidArgument(fmt::format("toke_windows: {} has no experts or top-k", w.shape.text()));
        const double per = static_cast<double>(w.shape.topk) / static_cast<double>(w.shape.e);
        TokeWindow t;
        t.shape = w.shape;
        t.tok_lo = static_cast<double>(w.m_lo) * per;
        t.tok_hi = static_cast<double>(w.m_hi) * per;
        t.block_m = w.block_m;
        t.schedule = w.schedule;
        t.config = w.config;
        out.push_back(std::move(t));
    }
    return out;
}

const MWindow* find_window(std::span<const MWindow> windows, int64_t m) {
    if (windows.empty()) return nullptr;
    // sorted by m_lo, contiguous: the last window starting at or below m
    auto it = std::upper_bound(windows.begin(), windows.end(), m,
                               [](int64_t v, const MWindow& w) { return v < w.m_lo; });
    if (it == windows.begin()) return &windows.front();
    return &*(it - 1);
}

}  // namespace kiln::autotune
