// Warp-specialised decode GEMM instantiations of the development harness (see harness_kernels.cuh),
// one translation unit per weight format (-DWS_FORMAT=0 INT4, 1 MXFP4, 2 MXFP4 wide scales) and schedule
// (-DWS_SCHED=2 static, 3 dynamic), compiled in parallel.
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

#define WS_FN2(f, sc) select_decode_ws_##f##_##sc
#define WS_FN(f, sc) WS_FN2(f, sc)

namespace harness {
DecodeKernel WS_FN(WS_FORMAT, WS_SCHED)(int mode, int act, bool mask, int recs, int tiles) {
    constexpr int F = WS_FORMAT == 0 ? kFormatInt4 : kFormatMxfp4;
    return sel_mode<F, WS_FORMAT == 2, WS_SCHED>(mode, act, mask, recs, tiles);
}
}  // namespace harness
