// Op cases of family moe_w4a16_decode_fused: the layer's one-launch decode path (device only), with the ring
// depths and stage widths it takes, items shared by 2 and 4 warp groups, and a claim window.
#include "tests/ops/cases.hpp"
#include "tests/ops/moe_w4a16_layer_case.hpp"

namespace kiln::ops {

using autotune::MoeW4A16Tuning;
using autotune::SchedulePick;
using moe_test::MoeLayerConfig;

namespace {

MoeLayerConfig fused(const char* name, int stages, int block_k, int k_groups, int64_t fused_min, int window = 1,
                     int64_t rows_min = -1) {
    return {name, [=](MoeW4A16Tuning& t) {
                t.gate_up_schedule = SchedulePick::dynamic;
                t.down_schedule = SchedulePick::dynamic;
                t.gate_up_k_chunk = 0;
                t.down_k_chunk = -1;
                t.order_window = window;
                t.rows_combine_min = rows_min;
                t.prefill_min = -1;
                t.fuse = true;
                t.decode_stages = stages;
                t.decode_block_k = block_k;
                t.fused_k_groups = k_groups;
                if (k_groups > 1) t.fused_k_groups_max_slots = int64_t(1) << 20;  // every fused call
                t.fused_min = fused_min;
            },
            1, true};
}

}  // namespace

void add_moe_w4a16_decode_fused_cases(CaseList& out) {
    std::vector<MoeLayerConfig> configs = {
        fused("fused", 0, 0, 1, 1),
        fused("fused, 64 inputs x 3 stages", 3, 64, 1, 1),
        fused("fused, 128 inputs", 0, 128, 1, 1),
        // items shared by warp groups, each streaming a part of K (fewer where K or shared memory do not allow)
        fused("fused, 4 groups per item, 64 inputs x 3 stages", 3, 64, 4, 1),
        fused("fused, 2 groups per item", 0, 0, 2, 1),
        fused("fused, rows + combine above it, window 8", 0, 0, 1, 1, 8, 0),
    };
    // the quick set (gpu-check's default) keeps the first 2; KILN_TEST_OPS_ALL=1 runs every one
    for (size_t i = 2; i < configs.size(); ++i) configs[i].quick = false;
    moe_test::add_layer_cases(out, "moe_w4a16_decode_fused", moe_test::device_problems(), configs);
}

}  // namespace kiln::ops
