// MXFP4 wide-scale decode GEMM instantiations of the development harness (see harness_kernels.cuh).
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

namespace harness {
DecodeKernel select_decode_mxfp4_wide(int sched, int mode, int act, bool mask, int recs, int tiles) {
    return sel_fw<kFormatMxfp4, true>(sched, mode, act, mask, recs, tiles);
}
}  // namespace harness
