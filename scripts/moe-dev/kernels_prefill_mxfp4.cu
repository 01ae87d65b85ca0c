// MXFP4 prefill GEMM instantiations of the development harness (see harness_kernels.cuh).
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

namespace harness {
DecodeKernel select_prefill_mxfp4(int mode, int act, bool mask, int tiles, bool wide, int rb, int recs) {
    return wide ? sel_prefill<kFormatMxfp4, true>(mode, act, mask, tiles, rb, recs)
                : sel_prefill<kFormatMxfp4, false>(mode, act, mask, tiles, rb, recs);
}
}  // namespace harness
