// Kernel instantiations for the moe_w4a16 development harness (nvcc build of the same templates the
// JIT compiles). Every configuration the harness can run is listed here; the decode GEMMs are
// instantiated per weight format in kernels_*.cu (compiled in parallel) and reached through
// select_decode.
#pragma once

#include <cuda_runtime.h>

#include "moe_w4a16_decode.cuh"
#include "moe_w4a16_dequant.cuh"
#include "moe_w4a16_prefill.cuh"
#include "moe_w4a16_routing.cuh"

#ifndef HARNESS_KERNEL_DEFS
#include "moe_w4a16_combine.cuh"  // not a template: one translation unit only
#else
namespace kiln_dev::moe {
struct CombineParams;
}
#endif

namespace harness {

using namespace kiln_dev::moe;

using DecodeFn = void (*)(const DecodeParams);
using RoutingFn = void (*)(const RoutingParams);
using DequantFn = void (*)(const DequantParams);
using CombineFn = void (*)(const CombineParams);  // moe_w4a16_combine.cuh

struct DecodeKernel {
    DecodeFn fn = nullptr;
    int smem = 0;
    int stages = 0;
};

template <int F, int T, int R>
constexpr int stages_for() {
    return decode_default_stages<F, T, R>();
}

#ifdef HARNESS_KERNEL_DEFS
template <int F, bool W, int Mode, int Act, bool Mask, int T, int R, int Sched>
DecodeKernel make_decode() {
    constexpr int S = stages_for<F, T, R>();
    return {&moe_w4a16_decode<F, W, Mode, Act, Mask, T, S, R, Sched>, decode_smem_bytes<F, T, R>(S), S};
}

template <int F, bool W, int Mode, int Act, bool Mask, int R, int Sched>
DecodeKernel sel_tiles(int tiles) {
    switch (tiles) {
        case 1: return make_decode<F, W, Mode, Act, Mask, 1, R, Sched>();
        case 2: return make_decode<F, W, Mode, Act, Mask, 2, R, Sched>();
        case 4: return make_decode<F, W, Mode, Act, Mask, 4, R, Sched>();
        default: return {};
    }
}

template <int F, bool W, int Mode, int Act, bool Mask, int Sched>
DecodeKernel sel_recs(int recs, int tiles) {
    return recs == 2 ? sel_tiles<F, W, Mode, Act, Mask, 2, Sched>(tiles) : sel_tiles<F, W, Mode, Act, Mask, 1, Sched>(tiles);
}

template <int F, bool W, int Sched>
DecodeKernel sel_mode(int mode, int act, bool mask, int recs, int tiles) {
    if (mode == 1) return sel_recs<F, W, 1, 0, false, Sched>(recs, tiles);
    if (mode == 2) return sel_recs<F, W, 2, 0, false, Sched>(recs, tiles);
    if (act == kActSiluGlu)
        return mask ? sel_recs<F, W, 0, kActSiluGlu, true, Sched>(recs, tiles)
                    : sel_recs<F, W, 0, kActSiluGlu, false, Sched>(recs, tiles);
    return mask ? sel_recs<F, W, 0, kActSituGlu, true, Sched>(recs, tiles)
                : sel_recs<F, W, 0, kActSituGlu, false, Sched>(recs, tiles);
}

template <int F, bool W>
DecodeKernel sel_fw(int sched, int mode, int act, bool mask, int recs, int tiles) {
    return sched == 1 ? sel_mode<F, W, 1>(mode, act, mask, recs, tiles) : sel_mode<F, W, 0>(mode, act, mask, recs, tiles);
}
#endif

// mode: 0 gate_up, 1 down combined (atomics), 2 down rows; sched: 0 static, 1 dynamic.
DecodeKernel select_decode_int4(int sched, int mode, int act, bool mask, int recs, int tiles);
DecodeKernel select_decode_mxfp4(int sched, int mode, int act, bool mask, int recs, int tiles);
DecodeKernel select_decode_mxfp4_wide(int sched, int mode, int act, bool mask, int recs, int tiles);

inline DecodeKernel select_decode(int format, bool wide, int sched, int mode, int act, bool mask, int recs, int tiles) {
    if (format == kFormatInt4) return select_decode_int4(sched, mode, act, mask, recs, tiles);
    if (wide) return select_decode_mxfp4_wide(sched, mode, act, mask, recs, tiles);
    return select_decode_mxfp4(sched, mode, act, mask, recs, tiles);
}

#ifdef HARNESS_KERNEL_DEFS
template <int F, bool W, int Mode, int Act, bool Mask, int T, int RB, int R = 1>
DecodeKernel make_prefill() {
    constexpr int S = prefill_default_stages<F, T, R>();
    return {&moe_w4a16_prefill<F, W, Mode, Act, Mask, T, S, RB, R>, prefill_smem_bytes<F, T, R>(S), S};
}
// Two records per step only for block_m 64 with one row-block per warp (the configuration kiln uses).
template <int F, bool W, int Mode, int Act, bool Mask>
DecodeKernel sel_prefill_tiles(int tiles, int rb, int recs) {
    if (tiles == 8 && rb == 1 && recs == 2) return make_prefill<F, W, Mode, Act, Mask, 8, 1, 2>();
    if (recs != 1) return {};
    if (tiles == 8) return rb == 1 ? make_prefill<F, W, Mode, Act, Mask, 8, 1>() : make_prefill<F, W, Mode, Act, Mask, 8, 2>();
    if (tiles == 16) return rb == 1 ? make_prefill<F, W, Mode, Act, Mask, 16, 1>() : make_prefill<F, W, Mode, Act, Mask, 16, 2>();
    return {};
}
template <int F, bool W>
DecodeKernel sel_prefill(int mode, int act, bool mask, int tiles, int rb, int recs) {
    if (mode == 2) return sel_prefill_tiles<F, W, 2, 0, false>(tiles, rb, recs);
    if (mode != 0) return {};
    if (act == kActSiluGlu)
        return mask ? sel_prefill_tiles<F, W, 0, kActSiluGlu, true>(tiles, rb, recs)
                    : sel_prefill_tiles<F, W, 0, kActSiluGlu, false>(tiles, rb, recs);
    return mask ? sel_prefill_tiles<F, W, 0, kActSituGlu, true>(tiles, rb, recs)
                : sel_prefill_tiles<F, W, 0, kActSituGlu, false>(tiles, rb, recs);
}
#endif

// Prefill GEMMs (moe_w4a16_prefill.cuh): mode 0 gate_up, 2 down rows; tiles 8 or 16 (block_m 64 / 128);
// rb: 16-row blocks per warp (2 or 1); recs: 64-wide records per K step (2 only for tiles 8, rb 1, and
// only for k_pad % 128 == 0: the caller picks).
DecodeKernel select_prefill_int4(int mode, int act, bool mask, int tiles, int rb, int recs);
DecodeKernel select_prefill_mxfp4(int mode, int act, bool mask, int tiles, bool wide, int rb, int recs);
inline DecodeKernel select_prefill(int format, bool wide, int mode, int act, bool mask, int tiles, int rb = 2,
                                   int recs = 1) {
    return format == kFormatInt4 ? select_prefill_int4(mode, act, mask, tiles, rb, recs)
                                 : select_prefill_mxfp4(mode, act, mask, tiles, wide, rb, recs);
}

// Measurement variants: the INT4 gate_up pipeline (one token tile) without the math.
DecodeKernel select_decode_skip_math(int sched);

inline RoutingFn select_routing(int block_m) {
    switch (block_m) {
        case 8: return &moe_w4a16_routing<8>;
        case 16: return &moe_w4a16_routing<16>;
        case 32: return &moe_w4a16_routing<32>;
        case 64: return &moe_w4a16_routing<64>;
        case 128: return &moe_w4a16_routing<128>;
        default: return nullptr;
    }
}

inline DequantFn select_dequant(int format, bool wide) {  // decode_mma16 layout
    if (format == kFormatInt4) return &moe_w4a16_dequant<kFormatInt4, false, kDecodeBlocks>;
    return wide ? &moe_w4a16_dequant<kFormatMxfp4, true, kDecodeBlocks> : &moe_w4a16_dequant<kFormatMxfp4, false, kDecodeBlocks>;
}

#ifndef HARNESS_KERNEL_DEFS
inline CombineFn select_combine() { return &moe_w4a16_combine; }  // defined in moe_harness.cu only
#endif

}  // namespace harness
