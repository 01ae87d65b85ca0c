// Op cases of the whole moe_w4a16 layer (model/layers/moe_w4a16) under one tuning: the problem's random
// weights, routing and activations, its output against the CPU reference within bf16 tolerance (relative L2
// 1e-2; exact zeros where no local expert is routed), and the plan the layer chose against the rule the
// tuning states. The decode, fused and prefill case files each add the configurations that exercise their
// family; problems are shared by the configurations that run them (their data and reference are made once).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autotune/heuristics/moe_w4a16.hpp"
#include "tests/ops/moe_w4a16_problem.hpp"
#include "tests/ops/op_case.hpp"

namespace kiln::ops::moe_test {

struct MoeSpec {
    const char* name;
    moe::W4Format fmt;
    MoeActivation act;
    int hidden, inter, experts, topk, tokens;
    const char* routing;
    int tiles;  // 0: the layer's choice
};

struct MoeLayerConfig {
    const char* name;
    // Changes to the format's default tuning (tiles are the problem's).
    std::function<void(autotune::MoeW4A16Tuning&)> apply = [](autotune::MoeW4A16Tuning&) {};
    int max_tokens_factor = 1;  // workspace for this many times the call's tokens
    bool device_only = false;   // a configuration of the device kernels alone
    bool quick = true;          // in the quick set (the others run with KILN_TEST_OPS_ALL=1)
};

// The layer on the device's problems (1 to 16k tokens, K2 / K3 shapes whole and sliced).
const std::vector<MoeSpec>& device_problems();
// Smaller problems that every backend runs (the host target's reference cost bounds them).
const std::vector<MoeSpec>& shared_problems();
// Prefill-sized problems every backend runs.
const std::vector<MoeSpec>& shared_prefill_problems();

// One case per (problem, configuration) that applies, under `family`.
void add_layer_cases(CaseList& out, const std::string& family, const std::vector<MoeSpec>& problems,
                     const std::vector<MoeLayerConfig>& configs);

}  // namespace kiln::ops::moe_test
