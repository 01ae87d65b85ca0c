// The verification-cost table of speculative decoding: verify_cost[requests][tokens per request], the time
// of one decode step that verifies `tokens` tokens for each of `requests` requests. The spec planner prunes
// verify tokens against it, so it must never say that more work is cheaper: after measuring, the table is
// forced monotone (non-decreasing along both axes; each cell becomes the largest measurement at or below
// it in both), and the measured values are kept beside it so the shelves (flat runs, where the step is
// bound by something other than the tokens) and steps (jumps) stay visible.
//
// The table is measured on the model's real decode step by a caller-supplied StepTimer (the forward pass
// lives above autotune/): measure_verify_cost calls it for every cell, warm-up first, and keeps medians.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kiln::autotune {

struct VerifyCostTable {
    std::vector<int> requests;  // ascending, >= 1
    std::vector<int> tokens;    // tokens per request, ascending, >= 1
    std::vector<double> measured_ms;  // [requests.size()][tokens.size()], row major: the medians
    std::vector<double> ms;           // the same, forced monotone

    double measured(size_t r, size_t t) const { return measured_ms[r * tokens.size() + t]; }
    double at(size_t r, size_t t) const { return ms[r * tokens.size() + t]; }
    // The monotone cost of the smallest measured cell covering (requests, tokens); the last row / column for
    // larger values. Throws InvalidArgument for an empty table or a non-positive argument.
    double cost(int requests, int tokens) const;
};

// Sets t.ms from t.measured_ms: ms[r][c] = max of measured over r' <= r, c' <= c.
void force_monotone(VerifyCostTable& t);

// A shelf of one row: tokens[first..last] cost within `flat` (relative) of the row's value at `first`.
struct CostShelf {
    int requests = 0;
    int tokens_first = 0, tokens_last = 0;
    double ms = 0;  // the monotone cost at tokens_first
};
std::vector<CostShelf> shelves(const VerifyCostTable& t, double flat = 0.05);

// Milliseconds of one step verifying `tokens` tokens for each of `requests` requests.
using StepTimer = std::function<double(int requests, int tokens)>;

// Times every cell: `warmup` untimed calls, then the median of `reps` calls. Throws InvalidArgument for
// empty or unsorted axes, non-positive values, or reps < 1; a timer returning a negative or non-finite
// time is an InvalidArgument naming the cell.
VerifyCostTable measure_verify_cost(std::span<const int> requests, std::span<const int> tokens, const StepTimer& timer,
                                    int reps = 5, int warmup = 1);

}  // namespace kiln::autotune
