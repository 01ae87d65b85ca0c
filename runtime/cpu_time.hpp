// CPU time consumed so far, in seconds: of the calling thread, or of the whole process. Unlike wall
// time, not inflated when other processes share the cores; for benchmarks.
#pragma once

#include <time.h>

namespace kiln {

inline double cpu_seconds(clockid_t clock) {
    timespec ts{};
    ::clock_gettime(clock, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }
inline double process_cpu_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace kiln
