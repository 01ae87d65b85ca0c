// The W4A16 MoE layer's benchmark (`kiln bench moe`): the K2 / K3 decode and prefill scenarios on the CUDA
// backend, timed with events over rotated weight copies (so weights are not L2-resident): per-launch events
// (route, gate_up, down), one whole call between two events, back-to-back calls, and the per-launch events
// again after that sustained load; bytes moved, TB/s, the fraction of the 4.8 TB/s HBM floor and TFLOP/s.
// The layer's tuning is the format's defaults with `set` applied (autotune/heuristics/moe_w4a16.hpp names the
// fields). `routing_dir` writes each scenario's routing and shapes for scripts/bench-humming.py, which times
// humming-kernels on the same inputs; `trace_dir` one fused call's per-item completion stamps.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::model::bench {

struct MoeBenchOptions {
    std::string scenario;  // only scenarios whose name contains this
    int iters = 60;
    std::string json_path, routing_dir, trace_dir;
    int warm_ms = 0;  // back-to-back calls for this long before timing (the board at its power limit)
    std::vector<std::pair<std::string, std::string>> set;  // tuning fields to change
};

// Prints one line per scenario and returns the results (also written to json_path). Throws InvalidArgument
// when no scenario matches or a tuning field is unknown, NoDevice without a GPU.
nlohmann::json run_moe_bench(const MoeBenchOptions& o);

// The scenario names, for --help.
std::vector<std::string> moe_bench_scenarios();

}  // namespace kiln::model::bench
