#include "tests/common/tolerance.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::test {

namespace {
template <typename Get>
OutputError error_of(size_t n, const std::vector<double>& ref, Get get) {
    OutputError e;
    for (size_t i = 0; i < n; ++i) {
        const double g = get(i);
        if (!std::isfinite(g)) {
            ++e.nonfinite;
            continue;
        }
        const double d = g - ref[i];
        e.num += d * d;
        e.den += ref[i] * ref[i];
        e.max_abs = std::max(e.max_abs, std::abs(d));
    }
    e.rel = e.den > 0 ? std::sqrt(e.num / e.den) : std::sqrt(e.num);
    return e;
}
}  // namespace

std::string OutputError::describe() const {
    return fmt::format("relative L2 error {:.3g}, max abs error {:.3g}, {} non-finite", rel, max_abs, nonfinite);
}

OutputError bf16_error(const std::vector<uint16_t>& got, const std::vector<double>& ref) {
    return error_of(std::min(got.size(), ref.size()), ref, [&](size_t i) { return runtime::bf16_to_float(got[i]); });
}

OutputError f32_error(const std::vector<float>& got, const std::vector<double>& ref) {
    return error_of(std::min(got.size(), ref.size()), ref, [&](size_t i) { return double(got[i]); });
}

}  // namespace kiln::test
