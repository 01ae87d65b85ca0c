// Kernel instantiations for the moe_w4a16 development harness (nvcc build of the same templates the
// JIT compiles). Every configuration the harness can run is listed here.
#pragma once

#include <cuda_runtime.h>

#include "moe_w4a16_decode.cuh"
#include "moe_w4a16_dequant.cuh"
#include "moe_w4a16_routing.cuh"

namespace harness {

using namespace kiln_dev::moe;

using DecodeFn = void (*)(const DecodeParams);
using RoutingFn = void (*)(const RoutingParams);
using DequantFn = void (*)(const DequantParams);

struct DecodeKernel {
    DecodeFn fn = nullptr;
    int smem = 0;
    int stages = 0;
};

// Deepest pipeline that fits 227 KB for four groups (at most 8 stages).
template <int F, int T, int R>
constexpr int stages_for() {
    constexpr int stage = DecodeSmem<F, T, R>::kStage;
    constexpr int per_group = 232448 / 4 - 128;
    return per_group / stage > 8 ? 8 : per_group / stage;
}

template <int F, bool W, int Mode, int Act, bool Mask, int T, int R>
DecodeKernel make_decode() {
    constexpr int S = stages_for<F, T, R>();
    return {&moe_w4a16_decode<F, W, Mode, Act, Mask, T, S, R>, decode_smem_bytes<F, T, S, R>(), S};
}

template <int F, bool W, int Mode, int Act, bool Mask, int R>
DecodeKernel sel_tiles(int tiles) {
    switch (tiles) {
        case 1: return make_decode<F, W, Mode, Act, Mask, 1, R>();
        case 2: return make_decode<F, W, Mode, Act, Mask, 2, R>();
        case 4: return make_decode<F, W, Mode, Act, Mask, 4, R>();
        default: return {};
    }
}

template <int F, bool W, int Mode, int Act, bool Mask>
DecodeKernel sel_recs(int recs, int tiles) {
    return recs == 2 ? sel_tiles<F, W, Mode, Act, Mask, 2>(tiles) : sel_tiles<F, W, Mode, Act, Mask, 1>(tiles);
}

template <int F, bool W>
DecodeKernel sel_fw(int mode, int act, bool mask, int recs, int tiles) {
    if (mode == 1) return sel_recs<F, W, 1, 0, false>(recs, tiles);
    if (act == kActSiluGlu)
        return mask ? sel_recs<F, W, 0, kActSiluGlu, true>(recs, tiles) : sel_recs<F, W, 0, kActSiluGlu, false>(recs, tiles);
    return mask ? sel_recs<F, W, 0, kActSituGlu, true>(recs, tiles) : sel_recs<F, W, 0, kActSituGlu, false>(recs, tiles);
}

inline DecodeKernel select_decode(int format, bool wide, int mode, int act, bool mask, int recs, int tiles) {
    if (format == kFormatInt4) return sel_fw<kFormatInt4, false>(mode, act, mask, recs, tiles);
    if (wide) return sel_fw<kFormatMxfp4, true>(mode, act, mask, recs, tiles);
    return sel_fw<kFormatMxfp4, false>(mode, act, mask, recs, tiles);
}

// Measurement variants: the INT4 gate_up pipeline without the math.
inline DecodeKernel select_decode_skip_math(int tiles) {
    constexpr int S = stages_for<kFormatInt4, 1, 2>();
    if (tiles != 1) return {};
    return {&moe_w4a16_decode<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, true>,
            decode_smem_bytes<kFormatInt4, 1, S, 2>(), S};
}

inline RoutingFn select_routing(int block_m) {
    switch (block_m) {
        case 8: return &moe_w4a16_routing<8>;
        case 16: return &moe_w4a16_routing<16>;
        case 32: return &moe_w4a16_routing<32>;
        default: return nullptr;
    }
}

inline DequantFn select_dequant(int format, bool wide) {  // decode_mma16 layout
    if (format == kFormatInt4) return &moe_w4a16_dequant<kFormatInt4, false, kDecodeBlocks>;
    return wide ? &moe_w4a16_dequant<kFormatMxfp4, true, kDecodeBlocks> : &moe_w4a16_dequant<kFormatMxfp4, false, kDecodeBlocks>;
}

}  // namespace harness
