// Fitting windows from a sweep. For one ShapeKey, the measurements give each candidate config's median at
// each measured M. fit_m_windows walks M upwards and keeps one config for as long as it stays within
// `tolerance` of the fastest candidate at every M of the window; where no config does, a new window
// starts. Of the configs that cover a window, the one with the least summed time wins. The windows
// cover [1, largest measured M] without gaps (a window reaches up to the next one's first M), so a
// server's call of any size up to the sweep's largest maps to exactly one window, and the number of
// windows (hence of kernel sets) is bounded by the measured sizes, in practice a handful.
// Larger tolerances give fewer windows; 0 keeps the fastest config at every measured M.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "autotune/tune_types.hpp"

namespace kiln::autotune {

// The M a window's kernels are built for: the window's last M for families that bake M into the kernel
// (the layer's workspace capacity for the MoE layer), or a family-defined value.
using BucketOf = std::function<int64_t(const MWindow&)>;

// Windows of one shape (every measurement must have it; InvalidArgument otherwise, or for none at all).
// `tolerance` is relative (0.03: within 3% of the fastest). Measurements are not required at every M, but
// a config is a candidate for a window only when it was measured at every M of it.
std::vector<MWindow> fit_m_windows(std::span<const Measurement> ms, double tolerance,
                                   const BucketOf& bucket_of = nullptr);

// The same windows over routed tokens per expert: tok = m x topk / e, each window reaching to the next
// one's start (the last one to its own end).
std::vector<TokeWindow> toke_windows(std::span<const MWindow> windows);

// The window holding `m` (m_lo <= m <= m_hi), the last window for larger m, nullptr for none.
const MWindow* find_window(std::span<const MWindow> windows, int64_t m);

}  // namespace kiln::autotune
