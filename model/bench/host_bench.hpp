// What `kiln bench host` measures: the host target's numbers on this machine.
//   - cold compile per host kernel (clang front end, O3, codegen, object size) into a fresh cache;
//   - warm load of the same kernels from SQLite by a new loader (no clang);
//   - speed of the JIT-compiled, shape-specialised kernels against the families' plain reference
//     implementations and a plain fp32 loop, on 1 thread and on the whole pool.
// Every JIT result is checked against its reference (Error when it differs). Only present when kiln
// is built with host_jit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/host_compiler.hpp"

namespace kiln::model::bench {

struct HostBenchOptions {
    double min_seconds = 0.3;  // per measurement (median of at least 3 runs)
    std::string cache_dir;     // "" = a fresh temporary directory (cold compiles are really cold)
};

struct HostBenchCompile {
    std::string kernel;  // canonical descriptor text
    jit::HostCompileStats cold, warm;
    double cold_cpu_ms = 0;  // process CPU time of the cold compile
};

struct HostBenchSpeed {
    std::string kernel, shape;
    double reference_ms = 0;  // CPU ms, one thread
    double plain_ms = -1;     // CPU ms, one thread (-1: none)
    double jit_ms = 0;        // CPU ms, one thread, the kernel called directly
    double launch_ms = 0;     // wall ms: launch on a host stream with the whole pool + synchronize
    double bytes = 0;         // bytes the kernel must touch, for GB/s
};

struct HostBenchResult {
    std::string target;  // host-<triple>-<cpu>
    std::string llvm;    // LLVM version
    unsigned threads = 0;  // the host pool (KILN_HOST_THREADS)
    uint64_t clang_invocations_cold = 0, clang_invocations_warm = 0;
    std::vector<HostBenchCompile> compile;
    std::vector<HostBenchSpeed> speed;
};

HostBenchResult run_host_bench(const HostBenchOptions& options);

}  // namespace kiln::model::bench
