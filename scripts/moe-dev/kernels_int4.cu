// INT4 decode GEMM instantiations of the development harness (see harness_kernels.cuh).
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

namespace harness {
DecodeKernel select_decode_int4(int sched, int mode, int act, bool mask, int recs, int tiles) {
    return sel_fw<kFormatInt4, false>(sched, mode, act, mask, recs, tiles);
}
DecodeKernel select_decode_skip_math(int sched) {
    constexpr int S = stages_for<kFormatInt4, 1, 2>();
    if (sched == 1)
        return {&moe_w4a16_decode<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, 1, true>,
                decode_smem_bytes<kFormatInt4, 1, 2>(S), S};
    return {&moe_w4a16_decode<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, 0, true>,
            decode_smem_bytes<kFormatInt4, 1, 2>(S), S};
}
}  // namespace harness
