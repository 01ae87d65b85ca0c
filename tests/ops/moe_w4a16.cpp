// Op cases of the moe_w4a16 layer as shipped: the format's default tuning (the documented heuristics), on
// every problem and backend.
#include "tests/ops/cases.hpp"
#include "tests/ops/moe_w4a16_layer_case.hpp"

namespace kiln::ops {

void add_moe_w4a16_cases(CaseList& out) {
    const std::vector<moe_test::MoeLayerConfig> defaults = {{"the defaults"}};
    moe_test::MoeLayerConfig device_defaults{"the defaults"};
    device_defaults.device_only = true;
    moe_test::add_layer_cases(out, "moe_w4a16", moe_test::device_problems(), {device_defaults});
    moe_test::add_layer_cases(out, "moe_w4a16", moe_test::shared_problems(), defaults);
    moe_test::add_layer_cases(out, "moe_w4a16", moe_test::shared_prefill_problems(), defaults);
}

}  // namespace kiln::ops
