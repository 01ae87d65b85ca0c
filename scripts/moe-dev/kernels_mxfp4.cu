// MXFP4 decode GEMM instantiations of the development harness (see harness_kernels.cuh).
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

namespace harness {
DecodeKernel select_decode_mxfp4(int sched, int mode, int act, bool mask, int recs, int tiles) {
    return sel_fw<kFormatMxfp4, false>(sched, mode, act, mask, recs, tiles);
}
}  // namespace harness
