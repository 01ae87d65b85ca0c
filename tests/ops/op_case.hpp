// The op harness: every kernel family (and every layer composed of them) has op cases, each a fixed shape
// and initialisation with a simple fp32 / fp64 CPU reference and a tolerance, and every case runs on every
// backend that is available (the host target, the CUDA device). Two modes share the cases:
//   check  (tests/ops/test_ops.cpp, suites unit and gpu): poison the outputs, run, compare; twice, so a
//          kernel that leaves its workspace dirty fails the second run
//   perf   (`kiln bench op`): warm up, then time back-to-back runs with the backend's events and report the
//          median against the case's floor (bytes over the memory bandwidth, FLOPs over the peak)
// A case file per family (tests/ops/<family>.cpp) adds its cases in add_<family>_cases(); all_cases()
// calls them all (explicitly, no static registration).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/backends.hpp"

namespace kiln::ops {

struct Cost {
    double bytes = 0;  // memory traffic the op cannot avoid (its inputs read once, its outputs written once)
    double flops = 0;
};

class OpCase {
public:
    virtual ~OpCase() = default;
    virtual std::string family() const = 0;  // the family or layer the case exercises
    virtual std::string name() const = 0;    // unique across all cases
    virtual bool runs_on(const test::TestBackend&) const { return true; }
    // Part of the quick set (the default of the gpu suite and of gpu-check); the rest runs with KILN_TEST_OPS_ALL=1.
    virtual bool quick() const { return true; }

    // Inputs on the backend and the kernels it needs (compiled here, never timed).
    virtual void setup(test::TestBackend& b) = 0;
    virtual void poison(test::TestBackend& b) = 0;
    virtual void run(test::TestBackend& b) = 0;
    // Reads the outputs back (after the stream is synchronised) and returns what is wrong, one line each.
    virtual std::vector<std::string> check(test::TestBackend& b) = 0;
    // Frees what setup allocated.
    virtual void teardown(test::TestBackend& b) = 0;
    virtual Cost cost() const = 0;
};

using CaseList = std::vector<std::unique_ptr<OpCase>>;

// Cases whose name contains `filter` (all when empty), family by family.
CaseList all_cases(const std::string& filter = "");
std::vector<std::string> families();

// Check mode: setup, then twice poison / run / synchronize / check; returns the failures.
std::vector<std::string> check_case(OpCase& c, test::TestBackend& b);

struct PerfResult {
    std::string name, backend;
    double us = 0;        // median per run
    double bytes = 0, flops = 0;
    double floor_us = 0;  // max(bytes / bandwidth, flops / peak) on this backend; 0 where there is no floor
};
// Perf mode: setup, `warmup` runs, then `iters` runs each between two events.
PerfResult time_case(OpCase& c, test::TestBackend& b, int iters, int warmup);

// The floors of the CUDA backend (H200 datasheet): 4.8 TB/s, 790 TFLOP/s bf16.
constexpr double k_hbm_bytes_per_s = 4.8e12;
constexpr double k_peak_flops = 790e12;

}  // namespace kiln::ops
