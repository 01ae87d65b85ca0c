// INT4 prefill GEMM instantiations of the development harness (see harness_kernels.cuh).
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

namespace harness {
DecodeKernel select_prefill_int4(int mode, int act, bool mask, int tiles, int rb, int recs) {
    return sel_prefill<kFormatInt4, false>(mode, act, mask, tiles, rb, recs);
}
}  // namespace harness
