// What `kiln bench jit` measures: the first NVRTC use, the cold NVRTC compile and load of a few
// kernels into a private temporary cache, their warm load from SQLite by a fresh dispatcher, and
// (with a GPU) the host cost of a cache-hit dispatch over a bare cuLaunchKernelEx. Numbers only.
#pragma once

#include <string>
#include <vector>

#include "jit/descriptor.hpp"

namespace kiln::jit {

struct JitBenchOptions {
    int iters = 20000;  // launches per path in the dispatch benchmark
    int reps = 5;       // repetitions of the warm-load measurement (median)
};

struct JitBenchKernel {
    std::string label;
    KernelDescriptor desc;
    double compile_ms = 0, cold_total_ms = 0, cold_load_ms = 0;  // cold_load_ms: GPU only
    double warm_fetch_ms = 0, warm_load_ms = 0;                  // warm_load_ms: GPU only
};

struct JitDispatchNumbers {
    double bare_us = 0, dispatched_us = 0, overhead_us = 0, lookup_ns = 0;
};

struct JitBenchResult {
    bool gpu = false;
    std::string device_name;  // "none" without a GPU
    Target target;            // the device's, else sm_90a (compile only)
    std::string nvrtc;        // NVRTC identity
    double nvrtc_load_ms = 0, first_compile_ms = 0;
    std::vector<JitBenchKernel> kernels;
    JitDispatchNumbers dispatch;   // GPU only
    std::string dispatch_skipped;  // why load and dispatch were not measured (no GPU)
};

JitBenchResult run_jit_bench(const JitBenchOptions& options);

}  // namespace kiln::jit
