// Every kernel a model can ask for on a target, as descriptors, for `kiln cache build`: per moe_w4a16 shape
// of the model, the layer of every M-window (autotune/tuned_tables.hpp: the tune DB's windows for calls up
// to max_tokens, or the heuristics' one window) with its tuning, for both MXFP4 scale paths (a checkpoint's
// scales decide at load which one its kernels take). The set is the union, without duplicates, in a fixed
// order. It covers the layers that plan their kernels through model/layers/.
#pragma once

#include <vector>

#include "autotune/tuned_tables.hpp"
#include "jit/descriptor.hpp"
#include "model/config.hpp"
#include "model/tune/moe_w4a16_sweep.hpp"

namespace kiln::model::tune {

struct ModelKernels {
    std::vector<jit::KernelDescriptor> kernels;
    size_t windows = 0;       // layer windows planned (all shapes)
    size_t tuned_windows = 0;  // of those, from the tune DB
};

// Throws InvalidArgument for max_tokens < 1 or ep_size < 1, or a model with no layer to plan.
ModelKernels model_kernels(const ModelConfig& config, const autotune::TunedTables& tables, jit::Target target,
                           int max_tokens, int ep_size);

}  // namespace kiln::model::tune
