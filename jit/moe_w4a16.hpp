// One W4A16 routed-expert layer on the GPU: routing prep, gate_up with the GLU, down with the router
// weights and the per-token combine, on one stream with nothing read back to the host
// (graph-capturable): one launch for decode calls that take the fused kernel, three or four otherwise.
//
//   MoeW4A16 layer(dispatcher, gate_up_weights, down_weights, {act, topk, max_tokens});
//   layer.forward(gate_up_ptr, down_ptr, x, topk_ids, topk_weights, out, stream);
//
// The weights are prepared in the decode layout (jit/moe_w4a16_weights.hpp) and live on the device
// (DeviceMoeWeights, or any pointer to bytes of that layout: benchmarks rotate copies). The layer owns
// its workspace (sorted rows, the bf16 intermediate, an fp32 accumulator that every call leaves at
// zero, per-slice counters, the dynamic schedule's claim counters and split-K scratch, which calls also
// leave at zero). Token ids outside [0, experts) are skipped (experts of other EP ranks); a token with
// no local expert gets a zero output row.
//
// Per call (M is known on the host, nothing is read back) the layer picks, for each GEMM, the static or
// the dynamic schedule and, for down, the combine path: fp32 atomics, or from `rows_combine_min`
// routed slots on one bf16 row per routed row and a fourth launch that sums each token's rows
// (deterministic, no atomics). The automatic choices are the measured best per problem class on H200
// (docs/perf-notes.md §8): gate_up dynamic for INT4 weights below 4096 routed slots, static otherwise;
// down dynamic, rows from 256 slots, K chunks chosen from M for the atomics path. From `prefill_min`
// routed slots per local expert (M x top-k / experts) a call runs the prefill configuration instead
// (docs/perf-notes.md §9, §11-13): routing into m-blocks of 64, 128 or 192 rows (prefill_block_m, by
// default from the expected rows per expert), the prefill GEMMs (one CTA per m-block and 128-row
// super-block, or per several super-blocks for short K; warpgroup MMAs on sm_90a, warp-specialised
// kernels for the large m-blocks, whose down writes its rows as tiles of 64 columns), down rows + combine.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "jit/dispatcher.hpp"
#include "jit/family_moe_w4a16.hpp"
#include "jit/moe_w4a16_weights.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/tensor.hpp"

namespace kiln::jit {

// Expert weights of one matrix kind (gate_up or down) on the device.
struct DeviceMoeWeights {
    moe::PreparedMoeWeights meta;  // layout metadata; bytes left empty
    runtime::DeviceBuffer buffer;

    static DeviceMoeWeights upload(const moe::PreparedMoeWeights& w);
    CUdeviceptr ptr() const { return buffer.ptr(); }
};

enum class MoeW4A16SchedulePick : uint8_t { automatic = 0, static_shares = 1, dynamic = 2 };

struct MoeW4A16Options {
    MoeActivation act = MoeActivation::silu_glu;
    int topk = 8;
    int max_tokens = 1;  // workspace capacity: tokens per forward
    int tiles = 0;       // token tiles of 8 per m-block (1, 2, 4); 0 = choose_tiles(max_tokens, ...)
    MoeW4A16SchedulePick gate_up_schedule = MoeW4A16SchedulePick::automatic;
    MoeW4A16SchedulePick down_schedule = MoeW4A16SchedulePick::automatic;
    // dynamic schedule: 64-wide records per work item along K; -1 automatic (the kernel splits a call
    // whose whole-K items are too few for the warp groups), 0 whole K. The rows path never splits.
    int gate_up_k_chunk = 0;  // measured: splitting gate_up helps the dynamic schedule but loses to static shares
    int down_k_chunk = -1;
    int order_window = 1;            // dynamic schedule: claim order, m-blocks per window (1: each matrix in order)
    int64_t rows_combine_min = 256;  // routed slots (M x topk) from which down writes rows + combine; -1 never
    // Routed slots per local expert, M x topk / experts (before any EP dropping: slots of other ranks'
    // experts count), from which a call runs the prefill configuration (routing with the prefill block_m, prefill
    // gate_up, prefill down rows, combine); -1 never, 0 always. Measured on H200 (K2 shapes, perf notes
    // §9, run 6d), in this quantity: the prefill configuration wins at 171 (TP8, 8192 tokens: 4084 vs
    // 4455 us) and 225 (EP8, 2048 tokens, ~1350 reaching the rank, 41 rows per active expert: 976 vs
    // 1166 us), loses at 8 (grouped decode) and 44 (EP8 decode, 8.7 rows per active expert). 128 lies
    // between; nothing between 44 and 171 was measured.
    int64_t prefill_min = 128;
    // The prefill GEMMs as warpgroup MMAs (moe_w4a16_prefill_wgmma.cuh) where the device is sm_90a;
    // false: the mma.sync version (the only one elsewhere).
    bool prefill_wgmma = true;
    // wgmma prefill GEMMs with K >= 2048: CTAs of two super-blocks side by side (one per SM) instead of
    // one (two per SM). Measured slower on H200 (K2 EP8 2048 and TP8 8192: +8-10%, perf notes §11).
    bool prefill_wide = false;
    // Rows per m-block of the prefill configuration: 64, or 128 / 192 (the warp-specialised wgmma
    // kernel, sm_90a); 0 = per call from the expected rows per expert r = M x topk / (experts x ep_size)
    // (the tok_e rule): 64 below 80, else the smallest of 128 and 192 holding 1.1 r, else 192.
    int prefill_block_m = 0;
    // Expert-parallel ranks the top-k ids are spread over (ids of other ranks' experts are skipped): the
    // automatic prefill block_m expects M x topk / ep_size routed rows here.
    int ep_size = 1;
    // Decode calls from fused_min routed slots (M x topk; -1 never) run as one persistent launch
    // (moe_w4a16_decode_fused: routing in every CTA's shared memory, gate_up and down both dynamic,
    // down items of an m-block start once its gate_up items are done, down rows summed per token in
    // the same launch) unless a schedule is forced static, up to the slots whose routing fits the
    // kernel's shared memory (fused_max_slots()).
    // Measured on H200 (perf notes §10, run 15): wins 5-8% at 128-800 routed slots on K2 and K3 (against
    // the best unfused choice); at 16 (K3 batch 1) it wins 15% with four warp groups per item (below),
    // and loses with one (§18, run 88; §19, run 90).
    bool fuse = true;
    int64_t fused_min = 1;
    // The fused decode kernel's ring: stages per warp group and inputs per stage (64, 128 or 256);
    // 0 = the defaults (MoeW4A16Family::fused). decode_block_k also applies to the unfused decode
    // kernels whose K it divides (0: their default, MoeW4A16Family::gemm: 256 where it fits).
    int decode_stages = 0;
    int decode_block_k = 0;
    // Warp groups of the fused kernel that share each work item, each streaming a part of its K (1, 2
    // or 4; fewer where K has too few stages or the partial sums do not fit the shared memory), in calls
    // of up to fused_k_groups_max_slots routed slots; larger calls take one group per item. Measured on
    // H200 (perf notes §19): K3 batch 1 53.2 -> 45.3-45.8 us (against the unfused kernels), batch 8 even,
    // K2 decode 20 (160 slots) and K3 batch 32 / 128 slower.
    int fused_k_groups = 4;
    int64_t fused_k_groups_max_slots = 128;
};

class MoeW4A16 {
public:
    // `gate_up` and `down` are layout metadata (their bytes are not used). Throws InvalidArgument for
    // mismatched shapes, formats or layouts (prefill-packed weights are refused here).
    MoeW4A16(Dispatcher& disp, const moe::PreparedMoeWeights& gate_up, const moe::PreparedMoeWeights& down,
             const MoeW4A16Options& opt);

    // x bf16 [M, hidden], topk_ids i32 [M, topk], topk_weights f32 [M, topk], out bf16 [M, hidden]; all on the
    // device, M <= max_tokens, rows contiguous. The weight pointers hold the layouts given at construction.
    void forward(CUdeviceptr gate_up, CUdeviceptr down, const runtime::TensorView& x,
                 const runtime::TensorView& topk_ids, const runtime::TensorView& topk_weights,
                 const runtime::TensorView& out, CUstream stream);

    // The launches separately (benchmarks time them one by one); forward() is these in order. The
    // routing launch fixes M for the call in flight (and with it the schedules and the down path);
    // launch_down includes the combine launch when the call uses the rows path. A fused call launches
    // once, in launch_gate_up (routing, both GEMMs and the combine); the other two launch nothing.
    void launch_routing(const runtime::TensorView& topk_ids, const runtime::TensorView& topk_weights, CUstream stream);
    // `down` and `out` are used only by the fused configuration.
    void launch_gate_up(CUdeviceptr gate_up, CUdeviceptr down, const runtime::TensorView& x,
                        const runtime::TensorView& out, CUstream stream);
    void launch_down(CUdeviceptr down, const runtime::TensorView& out, CUstream stream);
    // Of the call in flight:
    bool uses_rows_path() const { return use_rows_; }
    bool uses_prefill() const { return use_prefill_; }
    bool gate_up_dynamic() const { return gu_dyn_; }
    bool down_dynamic() const { return dn_dyn_; }
    bool uses_fused() const { return use_fused_; }
    // Routed slots (M x topk) up to which a call fits the fused kernel's shared memory (0: no fused kernel).
    int64_t fused_max_slots() const { return k_fused_ ? fused_max_slots_ : 0; }
    // Warp groups per item of the fused kernel in the call in flight (options.fused_k_groups in calls up
    // to fused_k_groups_max_slots, or fewer where it does not fit; else 1).
    int fused_k_groups_in_flight() const { return call_k_groups_; }

    // Token tiles per m-block from the expected rows per active expert (the tok_e rule): 1 up to 5 rows,
    // 2 up to 11, else 4. Experts with more rows than a block holds take several blocks.
    static int choose_tiles(int64_t tokens, int topk, int experts);

    int tiles() const { return tiles_; }
    // Measurement: the fused decode kernel stamps each work item's completion (globaltimer, ns) into
    // trace[item] (gate_up items m-block major, then down items), each CTA's start into trace[items +
    // cta], the end of its routing into trace[items + grid + cta] and its end into trace[items + 2 x
    // grid + cta] (u64, zero before the call). 0 turns it off.
    void set_fused_trace(CUdeviceptr trace) { fused_trace_ = trace; }
    const LoadedKernel& gate_up_kernel() const {
        return use_prefill_ ? *pre().gate_up : use_fused_ ? *k_fused_ : gu_dyn_ ? *k_gate_up_dyn_ : *k_gate_up_;
    }
    const LoadedKernel& down_kernel() const {
        return use_prefill_ ? *pre().down : use_rows_ ? *k_down_rows_ : dn_dyn_ ? *k_down_dyn_ : *k_down_;
    }
    const LoadedKernel& routing_kernel() const { return use_prefill_ ? *pre().routing : *k_routing_; }
    int prefill_block_m_in_flight() const { return pre_bm_; }

private:
    // Routing prep of the call in flight into m-blocks of `k`'s block_m, `cap` of them at most.
    void launch_routing_kernel(const LoadedKernel& k, const runtime::TensorView& topk_ids,
                               const runtime::TensorView& topk_weights, int cap, CUstream stream);
    MoeW4A16DecodeParams gate_up_params(CUdeviceptr gate_up, const runtime::TensorView& x) const;
    MoeW4A16DecodeParams down_params(CUdeviceptr down, const runtime::TensorView& out) const;
    void check_views(const runtime::TensorView& x, const runtime::TensorView& ids, const runtime::TensorView& w,
                     const runtime::TensorView& out) const;

    moe::PreparedMoeWeights gu_, dn_;  // metadata only
    MoeW4A16Options opt_;
    int tiles_ = 1;
    int sm_count_ = 0;
    int hidden_ = 0, inter_pad_ = 0, experts_ = 0;
    int mblock_cap_ = 0;      // m-blocks of 8 x tiles rows the workspace holds
    Target target_;
    int call_cap_ = 0;        // m-block capacity given to the routing launch of the call in flight (prefill)
    int tokens_ = 0;       // M of the call in flight (set by launch_routing)
    bool use_prefill_ = false;  // the call in flight runs the prefill configuration
    bool use_rows_ = false;  // the call in flight combines with the rows path
    bool gu_dyn_ = false, dn_dyn_ = false;  // ... and runs these GEMMs with the dynamic schedule
    bool use_fused_ = false;  // ... and runs both in the fused kernel
    int split_cap_ = 0;  // gate_up split-K scratch items
    int64_t gu_dyn_max_slots_ = 0;  // automatic gate_up schedule: dynamic below this many routed slots
    const LoadedKernel* k_routing_ = nullptr;
    const LoadedKernel* k_gate_up_ = nullptr;      // static schedule (null when never used)
    const LoadedKernel* k_gate_up_dyn_ = nullptr;  // dynamic schedule (null when never used)
    const LoadedKernel* k_down_ = nullptr;
    const LoadedKernel* k_down_dyn_ = nullptr;
    const LoadedKernel* k_down_rows_ = nullptr;    // rows mode, with the down schedule's rows pick
    const LoadedKernel* k_combine_ = nullptr;
    const LoadedKernel* k_fused_ = nullptr;        // fused decode (null when never used)
    // Prefill configuration per block_m 64 / 128 / 192 (null when never used).
    struct PrefillKernels {
        const LoadedKernel* routing = nullptr;
        const LoadedKernel* gate_up = nullptr;
        const LoadedKernel* down = nullptr;
    };
    PrefillKernels pre_[3];  // by block_m / 64 - 1
    const PrefillKernels& pre() const { return pre_[pre_bm_ / 64 - 1]; }  // the call in flight's
    bool has_prefill_ = false;  // some call can run the prefill configuration
    int pre_bm_ = 64;  // block_m of the call in flight (prefill)
    CUdeviceptr fused_trace_ = 0;
    int64_t fused_max_slots_ = 0;
    int fused_k_groups_ = 1;
    int call_k_groups_ = 1;
    CUdeviceptr ids_ = 0, weights_ = 0;  // routing inputs of the call in flight (fused)
    // The prefill block_m for `slots` routed slots (opt_.prefill_block_m, or the tok_e rule).
    int prefill_block_m(int64_t slots) const;
    runtime::DeviceBuffer counts_, nmb_, info_, sorted_token_, sorted_weight_, inter_, acc_, counters_;
    runtime::DeviceBuffer work_, split_acc_, split_cnt_, slot_pos_, rows_, gu_done_;
};

}  // namespace kiln::jit
