// The KDA token mixer's core (k3-model.md §1) on any backend, from the projected inputs of a step to the
// gated, normalised output that o_proj reads; the projections themselves are GEMMs outside this layer.
//
//   KdaLayer layer(dispatcher, backend, dims, memory_layout, kda_layer);
//   KdaPlan plan = layer.plan(step_index_host);   // host only, cheap
//   layer.run(plan, tensors, step_index, stream); // nothing read back to the host
//
// Per step (varlen, StepIndex order) it runs kda_prep (conv 4 with the slot's conv state, SiLU, L2 norms, gate,
// beta), kda_decode for single-token sequences and kda_chunk for the others (or kda_chunk for all, by the
// tuning), then kda_out_norm. The state of KDA layer `kda_layer` lives in every state slot at the layout's
// offsets: fp32 [H, K, V] recurrent state and bf16 [3][conv - 1][H x K] conv state, read as the step's initial
// state and left at the step's end; every snapshot of the step gets this layer's whole state (recurrent and
// conv) at its position. A fresh sequence's slot must hold zeros (the forward zeroes it before the layers).
// Weights (fp32, in the backend's memory): q/k/v conv taps [H x K, 4] (tap 3 multiplies the current token),
// dt_bias [H x K], A_log [>= H] read per head (entry h for head h), o_norm [K].
#pragma once

#include <cstdint>
#include <optional>

#include "autotune/heuristics/kda.hpp"
#include "common/step_index_params.h"
#include "jit/dispatcher.hpp"
#include "model/forward/memory_layout.hpp"
#include "model/forward/step_index.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::model::layers {

struct KdaLayerDims {
    int heads = 0;        // H on this rank
    int head_dim = 0;     // K = V: 32, 64 or 128
    int conv_size = 4;    // short conv kernel (4 is the one built)
    std::optional<float> gate_lower_bound;  // K3: -5 (lb x sigmoid gate); unset: the softplus gate
    float norm_eps = 1e-5f;                 // o_norm's epsilon (rms_norm_eps)
    int max_tokens = 0;   // workspace: new tokens one step may carry
};

struct KdaPlan {
    int num_seqs = 0, num_tokens = 0, num_decodes = 0;
    bool decode = false;       // kda_decode runs (the single-token sequences)
    bool chunk = false;        // kda_chunk runs
    bool chunk_skips_single = false;
};

struct KdaTensors {
    runtime::TensorView q_raw, k_raw, v_raw;  // bf16 [num_tokens, H x K], rows of one stride (may be views of a wider row)
    runtime::TensorView z;         // bf16 [num_tokens, H x K]: f_b(f_a x), before dt_bias
    runtime::TensorView beta_raw;  // bf16 [num_tokens, H]: b_proj x
    runtime::TensorView gate;      // bf16 [num_tokens, H x K]: g_proj x
    runtime::TensorView q_conv, k_conv, v_conv;  // f32 [H x K, 4]
    runtime::TensorView dt_bias;   // f32 [H x K]
    runtime::TensorView a_log;     // f32 [>= H]
    runtime::TensorView o_norm;    // f32 [K]
    runtime::TensorView out;       // bf16 [num_tokens, H x K]
};

class KdaLayer {
public:
    // Throws InvalidArgument when dims and layout disagree or the layer index is outside the layout.
    KdaLayer(jit::Dispatcher& disp, runtime::Backend& backend, const KdaLayerDims& dims,
             const forward::MemoryLayout& layout, int kda_layer, const autotune::KdaTuning& tuning = {});
    KdaLayer(const KdaLayer&) = delete;
    KdaLayer& operator=(const KdaLayer&) = delete;

    // The launches for a step of this shape (InvalidArgument beyond max_tokens).
    KdaPlan plan(const forward::StepIndexHost& shape) const;
    // Checks the tensors and the index against the plan (InvalidArgument; nothing enqueued then), then
    // enqueues the step's launches on `s`.
    void run(const KdaPlan& plan, const KdaTensors& t, const kiln_params::StepIndex& idx, runtime::Stream& s);

    const KdaLayerDims& dims() const { return dims_; }
    uint64_t state_offset() const { return state_offset_; }
    uint64_t conv_offset() const { return conv_offset_; }

private:
    void check(const KdaPlan& plan, const KdaTensors& t, const kiln_params::StepIndex& idx, const runtime::Stream& s) const;

    runtime::Backend& backend_;
    KdaLayerDims dims_;
    autotune::KdaTuning tuning_;
    uint64_t slot_bytes_ = 0, state_offset_ = 0, conv_offset_ = 0;
    const jit::LoadedKernel* prep_ = nullptr;
    const jit::LoadedKernel* chunk_ = nullptr;
    const jit::LoadedKernel* decode_ = nullptr;
    const jit::LoadedKernel* norm_ = nullptr;
    runtime::Buffer q_, k_, v_, g_, beta_, o_;  // fp32 workspace, max_tokens rows
};

}  // namespace kiln::model::layers
