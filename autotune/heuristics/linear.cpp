#include "autotune/heuristics/linear.hpp"

#include <charconv>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::autotune {

namespace {
constexpr LinearTuningField k_fields[] = {
    {"cublaslt", "the CUDA device uses cuBLASLt where it loads (true/false)"},
    {"cublaslt_min_m", "rows from which a call uses cuBLASLt"},
    {"small_m_max", "family tile 16x64 up to this many rows"},
    {"medium_m_max", "family tile 64x64 up to this many rows, 128x128 above"},
};

int64_t parse_int(std::string_view name, std::string_view v) {
    int64_t x = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || p != v.data() + v.size() || v.empty())
        throw InvalidArgument(fmt::format("{}={}: expected an integer", name, v));
    return x;
}
}  // namespace

LinearTuning default_linear_tuning() { return LinearTuning{}; }

void validate(const LinearTuning& t) {
    if (t.cublaslt_min_m < 0) throw InvalidArgument(fmt::format("cublaslt_min_m={} must be >= 0", t.cublaslt_min_m));
    if (t.small_m_max < 0) throw InvalidArgument(fmt::format("small_m_max={} must be >= 0", t.small_m_max));
    if (t.medium_m_max < t.small_m_max)
        throw InvalidArgument(fmt::format("medium_m_max={} must be >= small_m_max={}", t.medium_m_max, t.small_m_max));
}

LinearTile linear_tile(const LinearTuning& t, int64_t m) {
    if (m <= t.small_m_max) return {16, 64, 1, 4};
    if (m <= t.medium_m_max) return {64, 64, 2, 2};
    return {128, 128, 2, 4};
}

std::span<const LinearTuningField> linear_tuning_fields() { return k_fields; }

void set_tuning_field(LinearTuning& t, std::string_view name, std::string_view value) {
    if (name == "cublaslt") {
        if (value == "true" || value == "1") t.cublaslt = true;
        else if (value == "false" || value == "0") t.cublaslt = false;
        else throw InvalidArgument(fmt::format("cublaslt={}: expected true or false", value));
    } else if (name == "cublaslt_min_m") {
        t.cublaslt_min_m = parse_int(name, value);
    } else if (name == "small_m_max") {
        t.small_m_max = parse_int(name, value);
    } else if (name == "medium_m_max") {
        t.medium_m_max = parse_int(name, value);
    } else {
        std::string names;
        for (const auto& f : k_fields) names += fmt::format("{}{}", names.empty() ? "" : ", ", f.name);
        throw InvalidArgument(fmt::format("unknown linear tuning field '{}' (fields: {})", name, names));
    }
    validate(t);
}

std::string describe(const LinearTuning& t) {
    return fmt::format("cublaslt={},cublaslt_min_m={},small_m_max={},medium_m_max={}", t.cublaslt, t.cublaslt_min_m,
                       t.small_m_max, t.medium_m_max);
}

}  // namespace kiln::autotune
