// INT4 decode GEMM instantiations of the development harness (see harness_kernels.cuh).
#define HARNESS_KERNEL_DEFS
#include "harness_kernels.cuh"

namespace harness {
DecodeKernel select_decode_int4(int sched, int mode, int act, bool mask, int recs, int tiles) {
    return sel_fw<kFormatInt4, false>(sched, mode, act, mask, recs, tiles);
}
DecodeKernel select_decode_skip_math(int sched) {
    if (sched >= 2) {
        constexpr int S = decode_ws_default_stages<kFormatInt4, 1, 2>();
        constexpr int smem = decode_ws_smem_bytes<kFormatInt4, 1, 2>(S);
        if (sched == 3)
            return {&moe_w4a16_decode_ws<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, 1, true>, smem, S, kDecodeWsThreads};
        return {&moe_w4a16_decode_ws<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, 0, true>, smem, S, kDecodeWsThreads};
    }
    if (sched == 1) {
        constexpr int S = stages_for<kFormatInt4, 1, 2, 1>();
        return {&moe_w4a16_decode<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, 1, true>,
                decode_smem_bytes<kFormatInt4, 1, S, 2, 1>(), S};
    }
    constexpr int S = stages_for<kFormatInt4, 1, 2, 0>();
    return {&moe_w4a16_decode<kFormatInt4, false, 0, kActSiluGlu, false, 1, S, 2, 0, true>,
            decode_smem_bytes<kFormatInt4, 1, S, 2, 0>(), S};
}
}  // namespace harness
