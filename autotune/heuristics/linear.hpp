// The linear layer's choices (model/layers/linear.hpp): cuBLASLt or the `linear` family on the CUDA device,
// and the family's tile for a call of M rows. LinearTuning holds every knob with the defaults documented
// in docs/perf/dense.md; linear_tuning_fields() names them for `--set name=value` and the autotune DB.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::autotune {

struct LinearTuning {
    bool cublaslt = true;        // the CUDA device uses cuBLASLt where it loads (else the linear family)
    int64_t cublaslt_min_m = 1;  // ... for calls of at least this many rows
    int64_t small_m_max = 16;    // family tiles: M <= small_m_max: 16 x 64 (1 x 4 warps)
    int64_t medium_m_max = 64;   //               M <= medium_m_max: 64 x 64 (2 x 2 warps); else 128 x 128 (2 x 4)
};

LinearTuning default_linear_tuning();
// Throws InvalidArgument naming the first field out of range.
void validate(const LinearTuning& t);

struct LinearTile {
    int block_m = 0, block_n = 0, warps_m = 0, warps_n = 0;
};
LinearTile linear_tile(const LinearTuning& t, int64_t m);

struct LinearTuningField {
    std::string_view name;
    std::string_view help;
};
std::span<const LinearTuningField> linear_tuning_fields();
void set_tuning_field(LinearTuning& t, std::string_view name, std::string_view value);  // throws InvalidArgument
std::string describe(const LinearTuning& t);  // "name=value,..." of every field

}  // namespace kiln::autotune
