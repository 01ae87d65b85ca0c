// Op cases of family moe_w4a16_decode: the layer on its unfused decode paths, static and dynamic schedules
// (whole K, chosen and automatic K chunks, one-stage items with an odd claim window, 256-input stages), down
// combined with fp32 atomics or as rows + combine.
#include "tests/ops/cases.hpp"
#include "tests/ops/moe_w4a16_layer_case.hpp"

namespace kiln::ops {

using autotune::MoeW4A16Tuning;
using autotune::SchedulePick;
using moe_test::MoeLayerConfig;

namespace {

MoeLayerConfig unfused(const char* name, SchedulePick gate_up, SchedulePick down, int gu_chunk, int dn_chunk, int window,
                       int64_t rows_min, int block_k = 0) {
    return {name, [=](MoeW4A16Tuning& t) {
                t.gate_up_schedule = gate_up;
                t.down_schedule = down;
                t.gate_up_k_chunk = gu_chunk;
                t.down_k_chunk = dn_chunk;
                t.order_window = window;
                t.rows_combine_min = rows_min;
                t.prefill_min = -1;
                t.fuse = false;
                t.decode_block_k = block_k;
            },
            1, true};
}

}  // namespace

void add_moe_w4a16_decode_cases(CaseList& out) {
    const auto S = SchedulePick::static_shares, D = SchedulePick::dynamic;
    std::vector<MoeLayerConfig> device = {
        unfused("static, atomics", S, S, -1, -1, 1, -1),
        unfused("dynamic, whole K", D, D, 0, 0, 1, -1),
        unfused("dynamic, automatic chunks", D, D, -1, -1, 1, -1),
        unfused("dynamic, one-stage items, window 3", D, D, 1, 1, 3, -1),
        unfused("static, atomics, 256 inputs", S, S, -1, -1, 1, -1, 256),
        unfused("dynamic, automatic chunks, 256 inputs", D, D, -1, -1, 1, -1, 256),
        unfused("static, rows + combine, 256 inputs", S, S, -1, -1, 1, 0, 256),
        unfused("static, rows + combine", S, S, -1, -1, 1, 0),
        unfused("dynamic, rows + combine", D, D, -1, -1, 1, 0),
    };
    // the quick set (gpu-check's default) keeps the first 2; KILN_TEST_OPS_ALL=1 runs every one
    for (size_t i = 2; i < device.size(); ++i) device[i].quick = false;
    moe_test::add_layer_cases(out, "moe_w4a16_decode", moe_test::device_problems(), device);
    // every backend: the decode kernels with fp32 atomics, and rows + combine
    const std::vector<MoeLayerConfig> all = {
        {"decode, atomics", [](MoeW4A16Tuning& t) { t.rows_combine_min = -1, t.prefill_min = -1, t.fuse = false; }},
        {"decode, rows + combine", [](MoeW4A16Tuning& t) { t.rows_combine_min = 0, t.prefill_min = -1, t.fuse = false; }},
    };
    moe_test::add_layer_cases(out, "moe_w4a16_decode", moe_test::shared_problems(), all);
}

}  // namespace kiln::ops
