// One W4A16 routed-expert layer (INT4 or MXFP4 experts, group 32) on any backend: routing, gate_up with the
// SiLU-GLU or SiTU-GLU epilogue, down with the router weights, and the per-token combine, on one stream with
// nothing read back to the host (graph-capturable).
//
//   MoeW4A16 layer(dispatcher, backend, gate_up_meta, down_meta, shape, tuning);
//   MoeW4A16Plan plan = layer.plan(tokens);        // host only, cheap; reuse it for every call of that size
//   layer.run(plan, {gate_up_addr, down_addr, x, topk_ids, topk_weights, out}, stream);
//
// The weights are prepared in the decode layout (model/weights/moe_w4a16.hpp) and live in the backend's
// memory at the addresses a run names (benchmarks rotate copies). plan() picks, from M alone and the tuning
// (autotune/heuristics/moe_w4a16.hpp), one of four paths:
//   decode       route, gate_up, down combined per token with fp32 atomics
//   decode_rows  route, gate_up, down as one bf16 row per routed row, combine (deterministic)
//   fused        one persistent launch doing all of it (device only)
//   prefill      route into m-blocks of 64 / 128 / 192 rows, the prefill GEMMs, combine
// and the schedules. A plan holds no buffer state: any number of plans may be used in any order, but runs on
// one layer share its workspace, so they must be ordered (one stream). The layer owns the workspace (sorted
// rows, the bf16 intermediate, an fp32 accumulator and counters every call leaves at zero, the dynamic
// schedule's claim counters and split-K scratch, also left at zero). Token ids outside [0, experts) are
// skipped (experts of other EP ranks); a token with no local expert gets a zero output row.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "autotune/heuristics/moe_w4a16.hpp"
#include "common/moe_w4a16_decode_params.h"
#include "jit/dispatcher.hpp"
#include "jit/families/moe_w4a16_common.hpp"
#include "model/weights/moe_w4a16.hpp"
#include "runtime/backend.hpp"
#include "runtime/tensor.hpp"

namespace kiln::model::layers {

struct MoeW4A16Shape {
    jit::moe::Activation act = jit::moe::Activation::silu_glu;
    int topk = 8;
    int max_tokens = 1;  // workspace capacity: tokens per call
    int ep_size = 1;     // expert-parallel ranks the top-k ids are spread over
};

enum class MoeW4A16Path : uint8_t { decode = 0, decode_rows = 1, fused = 2, prefill = 3 };
const char* to_string(MoeW4A16Path p);

struct MoeW4A16Plan {
    int tokens = 0;
    MoeW4A16Path path = MoeW4A16Path::decode;
    bool gate_up_dynamic = false, down_dynamic = false;
    int mblock_cap = 0;   // m-blocks the routing may emit for this call (sizes the prefill grids)
    int block_m = 0;      // rows per m-block
    int k_groups = 1;     // fused: warp groups per item
    const jit::LoadedKernel* route = nullptr;  // null on the fused path
    const jit::LoadedKernel* gate_up = nullptr;  // the fused kernel on the fused path
    const jit::LoadedKernel* down = nullptr;     // null on the fused path
    const jit::LoadedKernel* combine = nullptr;  // decode_rows and prefill
    bool rows() const { return path != MoeW4A16Path::decode; }
};

struct MoeW4A16Tensors {
    uint64_t gate_up = 0, down = 0;  // the prepared weights' bytes in the backend's memory
    runtime::TensorView x;             // bf16 [M, hidden]
    runtime::TensorView topk_ids;      // i32 [M, topk]
    runtime::TensorView topk_weights;  // f32 [M, topk]
    runtime::TensorView out;           // bf16 [M, hidden]
};

// The kernels a layer of this shape and tuning loads on `target`, as descriptors, before anything is
// compiled or loaded: the constructor loads exactly these, and `kiln cache build` compiles them for a target
// that need not be present. Throws InvalidArgument as the constructor does.
struct MoeW4A16KernelSet {
    struct Prefill {
        std::optional<jit::KernelDescriptor> route, gate_up, down;
    };
    jit::KernelDescriptor route, down;
    std::optional<jit::KernelDescriptor> gate_up, gate_up_dyn, down_rows, combine, fused;
    Prefill prefill[3];  // by block_m / 64 - 1
    int tiles = 1;
    bool wgmma = false, prefill_possible = false, rows_possible = false, down_dynamic = false;
    int fused_k_groups = 1;
    int64_t fused_max_slots = 0;

    std::vector<jit::KernelDescriptor> all() const;
};
MoeW4A16KernelSet moe_w4a16_kernel_set(const weights::PreparedMoeWeights& gate_up, const weights::PreparedMoeWeights& down,
                                       const MoeW4A16Shape& shape, const autotune::MoeW4A16Tuning& tuning,
                                       jit::Target target);

class MoeW4A16 {
public:
    // `gate_up` and `down` are layout metadata (their bytes are not read). Throws InvalidArgument for
    // mismatched shapes, formats or layouts (prefill-packed weights are refused), or a tuning out of range.
    MoeW4A16(jit::Dispatcher& disp, runtime::Backend& backend, const weights::PreparedMoeWeights& gate_up,
             const weights::PreparedMoeWeights& down, const MoeW4A16Shape& shape, const autotune::MoeW4A16Tuning& tuning);
    ~MoeW4A16();
    MoeW4A16(const MoeW4A16&) = delete;
    MoeW4A16& operator=(const MoeW4A16&) = delete;

    // The launches of a call of `tokens` tokens (0 <= tokens <= max_tokens).
    MoeW4A16Plan plan(int tokens) const;
    // Checks the tensors against the plan (InvalidArgument; nothing is enqueued then), then enqueues the call.
    void run(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s);
    // The three launches of run() separately (benchmarks time them one by one): route (nothing on the fused
    // path), gate_up (the whole call on the fused path), down with the combine (nothing on the fused path).
    void run_route(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s);
    void run_gate_up(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s);
    void run_down(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, runtime::Stream& s);

    // Measurement: the fused kernel stamps each work item's completion (globaltimer, ns) into trace[item]
    // (gate_up items m-block major, then down items), each CTA's start into trace[items + cta], the end of its
    // routing into trace[items + grid + cta] and its end into trace[items + 2 x grid + cta] (u64, zero before
    // the call). 0 turns it off.
    void set_fused_trace(uint64_t trace) { fused_trace_ = trace; }

    int tiles() const { return tiles_; }
    int64_t fused_max_slots() const { return k_fused_ ? fused_max_slots_ : 0; }
    const autotune::MoeW4A16Tuning& tuning() const { return tuning_; }
    const MoeW4A16Shape& shape() const { return shape_; }
    int hidden() const { return hidden_; }
    // Every kernel a call of this layer can run.
    std::vector<const jit::LoadedKernel*> kernels() const;

private:
    struct PrefillKernels {
        const jit::LoadedKernel *route = nullptr, *gate_up = nullptr, *down = nullptr;
    };
    void check(const MoeW4A16Plan& p, const MoeW4A16Tensors& t, const runtime::Stream& s) const;
    kiln_params::moe::DecodeParams gate_up_params(const MoeW4A16Plan& p, const MoeW4A16Tensors& t) const;
    kiln_params::moe::DecodeParams down_params(const MoeW4A16Plan& p, const MoeW4A16Tensors& t) const;

    runtime::Backend& backend_;
    weights::PreparedMoeWeights gu_, dn_;  // metadata only
    MoeW4A16Shape shape_;
    autotune::MoeW4A16Tuning tuning_;
    jit::Target target_;
    int tiles_ = 1;
    int compute_units_ = 1;
    int hidden_ = 0, inter_pad_ = 0, experts_ = 0;
    int mblock_cap_ = 0;  // decode m-blocks the workspace holds
    int split_cap_ = 0;
    bool wgmma_ = false;
    bool has_prefill_ = false;
    const jit::LoadedKernel* k_route_ = nullptr;
    const jit::LoadedKernel* k_gate_up_ = nullptr;      // static schedule (null when never used)
    const jit::LoadedKernel* k_gate_up_dyn_ = nullptr;  // dynamic schedule (null when never used)
    const jit::LoadedKernel* k_down_ = nullptr;         // combined, with the down schedule
    const jit::LoadedKernel* k_down_rows_ = nullptr;    // rows (null when never used)
    const jit::LoadedKernel* k_combine_ = nullptr;
    const jit::LoadedKernel* k_fused_ = nullptr;
    PrefillKernels pre_[3];  // by block_m / 64 - 1
    int64_t fused_max_slots_ = 0;
    int fused_k_groups_ = 1;
    uint64_t fused_trace_ = 0;
    runtime::Buffer counts_, nmb_, info_, sorted_token_, sorted_weight_, inter_, acc_, counters_;
    runtime::Buffer work_, split_acc_, split_cnt_, slot_pos_, rows_, gu_done_;
};

// m-blocks the routing may emit for `slots` routed slots in blocks of `block_m` rows (at most one partly
// filled block per expert).
int moe_w4a16_mblock_capacity(int64_t slots, int experts, int block_m);
// What the kernels bake in about prepared weights.
jit::moe::MatrixShape matrix_shape(const weights::PreparedMoeWeights& w);

}  // namespace kiln::model::layers
