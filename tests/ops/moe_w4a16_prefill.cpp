// Op cases of family moe_w4a16_prefill: the layer's prefill path forced on every problem (routing into
// m-blocks of 64, 128 or 192 rows, the prefill GEMMs, rows + combine): warpgroup-MMA and mma.sync versions,
// wide CTAs, the warp-specialised kernel's block_m 128 / 192, and workspaces larger than the call.
#include "tests/ops/cases.hpp"
#include "tests/ops/moe_w4a16_layer_case.hpp"

namespace kiln::ops {

using autotune::MoeW4A16Tuning;
using moe_test::MoeLayerConfig;

namespace {

MoeLayerConfig prefill(const char* name, bool wgmma, bool wide, int block_m, int factor, bool device_only) {
    return {name, [=](MoeW4A16Tuning& t) {
                t.prefill_min = 0;
                t.prefill_wgmma = wgmma;
                t.prefill_wide = wide;
                t.prefill_block_m = block_m;
            },
            factor, device_only};
}

}  // namespace

void add_moe_w4a16_prefill_cases(CaseList& out) {
    std::vector<MoeLayerConfig> device = {
        prefill("prefill (forced)", true, false, 0, 1, true),
        prefill("prefill (forced), workspace for 3 M", true, false, 0, 3, true),
        prefill("prefill (forced), mma.sync", false, false, 0, 1, true),
        prefill("prefill (forced), wide CTAs", true, true, 64, 1, true),
        // (prefill-sized problems only; the automatic choice takes 192 where a problem has >= 117 rows per expert)
        prefill("prefill (forced), block_m 64", true, false, 64, 1, true),
        prefill("prefill (forced), block_m 128, workspace for 2 M", true, false, 128, 2, true),
    };
    // the quick set (gpu-check's default): wgmma with the layer's block_m, mma.sync and block_m 128;
    // KILN_TEST_OPS_ALL=1 runs every one
    for (size_t i : {1, 3, 4}) device[i].quick = false;
    moe_test::add_layer_cases(out, "moe_w4a16_prefill", moe_test::device_problems(), device);
    moe_test::add_layer_cases(out, "moe_w4a16_prefill", moe_test::shared_prefill_problems(),
                              {prefill("prefill (forced)", true, false, 0, 1, false)});
}

}  // namespace kiln::ops
