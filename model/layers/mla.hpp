// The attention core of one gated NoPE MLA layer (k3-model.md §3) on any backend, for one forward step of
// mixed decodes and prefill chunks (varlen, paged KV), on one stream with nothing read back to the host.
//
//   MlaLayer layer(dispatcher, backend, dims, memory_layout, mla_layer, max_tokens);
//   MlaPlan plan = layer.plan(step_index_host);   // host only, cheap
//   layer.run(plan, {q, latent, k_rope, kv_b, gate, out}, step_index, stream);
//
// It starts after the projections and norms: q [T, n_h (d_n + d_r)] (q_b's output), the normed latent ĉ
// [T, d_c] and the raw rope tail k_rope [T, d_r] (kv_a's output with kv_a_layernorm applied to its first d_c
// values; both may be strided views of one [T, d_c + d_r] buffer), and ends with o [T, n_h d_v] before o_proj.
// With a gate g [T, n_h d_v] (g_proj's output) o is multiplied by sigmoid(g) (K3's output gate); without one it
// is the attention output. A run, in stream order:
//   mla_cache_append  (ĉ, k_rope) of every new token into its page slot of this layer
//   mla_absorb q      q̃ = W_UKᵀ q_nope per head, with q_rope: the 576-wide query of the absorbed form
//   mla_decode        sequences with one new token, mla_prefill the others (causal over the cached prefix
//                     and the chunk); the context in pieces when the plan splits it
//   mla_combine       the pieces (only when split)
//   mla_absorb out    o = W_UV ō per head, times sigmoid(g)
// Scores are scaled by 1 / sqrt(d_n + d_r); nothing is rotated (NoPE). The KV pages are the arena's
// (model/forward/memory_layout.hpp) at the step index's page table. The workspace (the absorbed queries, the
// latent outputs, the pieces' partial outputs) is the layer's own, or an MlaWorkspace that the MLA layers of a
// model share; runs on layers sharing one must be ordered (one stream).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "autotune/heuristics/mla.hpp"
#include "common/step_index_params.h"
#include "jit/dispatcher.hpp"
#include "model/forward/memory_layout.hpp"
#include "model/forward/step_index.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::model::layers {

struct MlaDims {
    int heads = 0;         // n_h on this rank
    int kv_lora_rank = 0;  // d_c
    int qk_nope = 0;       // d_n
    int qk_rope = 0;       // d_r
    int v_head = 0;        // d_v
    int cache_dim() const { return kv_lora_rank + qk_rope; }
    int qk_head() const { return qk_nope + qk_rope; }
};

struct MlaPlan {
    int tokens = 0, seqs = 0;
    bool decode = false;   // mla_decode runs (the step has single-token sequences)
    bool prefill = false;  // mla_prefill runs (the step has longer ones)
    int splits = 1, split_keys = 64;  // the context pieces (autotune::choose_mla_split)
    bool combine = false;  // some token has more than one piece
    int64_t max_kv = 0;    // the longest context of the step, new tokens included
};

struct MlaTensors {
    runtime::TensorView q;       // bf16 [T, heads x (d_n + d_r)]
    runtime::TensorView latent;  // bf16 [T, d_c], rows may be strided (a multiple of 8 elements)
    runtime::TensorView k_rope;  // bf16 [T, d_r], rows may be strided
    runtime::TensorView kv_b;    // bf16 [heads x (d_n + d_v), d_c]: per head d_n rows W_UK, then d_v rows W_UV
    runtime::TensorView gate;    // bf16 [T, heads x d_v], or no data: no output gate
    runtime::TensorView out;     // bf16 [T, heads x d_v]
};

// Scratch memory of MLA runs, sized for `max_tokens` new tokens of layers with `dims` and `tuning` (the
// fp32 partial rows). K3 at 8192 tokens per step holds about 1.8 GB here, so a model keeps one for all its
// MLA layers rather than one per layer.
class MlaWorkspace {
public:
    MlaWorkspace(runtime::Backend& backend, const MlaDims& dims, int max_tokens, const autotune::MlaTuning& tuning);
    int max_tokens() const { return max_tokens_; }
    int64_t partial_rows() const { return partial_rows_; }
    const MlaDims& dims() const { return dims_; }

private:
    friend class MlaLayer;
    runtime::Backend& backend_;
    MlaDims dims_;
    int max_tokens_ = 0;
    int64_t partial_rows_ = 0;
    runtime::Buffer qt, latent_out, part_o, part_lse;
};

class MlaLayer {
public:
    // Throws InvalidArgument when the dims do not fit the kernels or the layout (cache_dim, the MLA layer
    // index), for a tuning out of range, or for a shared workspace of other dims, another backend, or less
    // room than max_tokens and the tuning's partial rows. Without a workspace the layer allocates its own.
    MlaLayer(jit::Dispatcher& disp, runtime::Backend& backend, const MlaDims& dims, const forward::MemoryLayout& layout,
             int mla_layer, int max_tokens, const autotune::MlaTuning& tuning = autotune::default_mla_tuning(),
             std::shared_ptr<MlaWorkspace> workspace = nullptr);
    MlaLayer(const MlaLayer&) = delete;
    MlaLayer& operator=(const MlaLayer&) = delete;

    // The launches of the step `idx` describes (InvalidArgument beyond max_tokens).
    MlaPlan plan(const forward::StepIndexHost& idx) const;
    // Checks the tensors and the step index against the plan (InvalidArgument; nothing is enqueued then),
    // then enqueues the step.
    void run(const MlaPlan& p, const MlaTensors& t, const kiln_params::StepIndex& idx, runtime::Stream& s);

    const MlaDims& dims() const { return dims_; }
    const autotune::MlaTuning& tuning() const { return tuning_; }
    // Every kernel a run can launch.
    std::vector<const jit::LoadedKernel*> kernels() const;

private:
    void check(const MlaPlan& p, const MlaTensors& t, const kiln_params::StepIndex& idx, const runtime::Stream& s) const;

    runtime::Backend& backend_;
    MlaDims dims_;
    autotune::MlaTuning tuning_;
    uint64_t layer_offset_ = 0, page_bytes_ = 0;
    int page_size_ = 1;
    int max_tokens_ = 0;
    int compute_units_ = 1;
    const jit::LoadedKernel* k_append_ = nullptr;
    const jit::LoadedKernel* k_absorb_q_ = nullptr;
    const jit::LoadedKernel* k_absorb_out_ = nullptr;
    const jit::LoadedKernel* k_decode_ = nullptr;
    const jit::LoadedKernel* k_prefill_ = nullptr;
    const jit::LoadedKernel* k_combine_ = nullptr;
    std::shared_ptr<MlaWorkspace> ws_;
};

}  // namespace kiln::model::layers
