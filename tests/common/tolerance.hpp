// Comparing a kernel's output with its reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/bf16.hpp"

namespace kiln::test {

// Relative L2 error over the finite elements (absolute when the reference is all zero), and the count of
// non-finite outputs (a poisoned element the kernel never wrote shows up here).
struct OutputError {
    double rel = 0, num = 0, den = 0;
    double max_abs = 0;
    long nonfinite = 0;
    bool within(double bound) const { return nonfinite == 0 && rel <= bound; }
    std::string describe() const;
};

OutputError bf16_error(const std::vector<uint16_t>& got, const std::vector<double>& ref);
OutputError f32_error(const std::vector<float>& got, const std::vector<double>& ref);

}  // namespace kiln::test
