// `kiln bench moe`: the W4A16 MoE layer (routing prep + gate_up + down) on the scenarios, timed
// with CUDA events over rotated weight copies (so weights are not L2-resident), with bytes moved,
// TB/s, the fraction of the 4.8 TB/s HBM floor and TFLOP/s. --routing-dir writes each scenario's
// routing and shapes for scripts/bench-humming.py, which times humming-kernels on the same inputs.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::jit {

void add_moe_bench(CLI::App& bench);

}  // namespace kiln::jit
