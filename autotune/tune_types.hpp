// The records of the tune DB (autotune/tune_db.hpp), kept apart from SQLite so fitting and the flat
// dispatch tables (autotune/tuned_tables.hpp) use them without a database.
//
// A ShapeKey names what one sweep tunes: a family and mode at fixed N, K, E (and top-k), plus `variant`,
// the remaining facts that pick kernels (weight format, activation). A Measurement is one timed point:
// the median of a config at M rows per call. Windows are the fitted result: M-windows [m_lo, m_hi] of
// calls that use one config and one kernel set (`bucket`: the M the kernels are built for), and the same
// windows over routed tokens per expert (tok_e = M x topk / E) with the block_m and schedule they pick.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace kiln::autotune {

struct ShapeKey {
    std::string family;   // "moe_w4a16"
    std::string mode;     // "layer"
    int64_t n = 0, k = 0, e = 0;
    int64_t topk = 0;
    std::string variant;  // e.g. "mxfp4_g32_e8m0/situ_glu"

    std::string text() const;  // "moe_w4a16/layer n=256 k=96 e=16 topk=4 mxfp4_g32_e8m0/situ_glu"
    friend auto operator<=>(const ShapeKey&, const ShapeKey&) = default;
};

struct Measurement {
    ShapeKey shape;
    int64_t m = 0;           // rows (tokens) per call
    std::string config;      // the candidate: "field=value,..." of the family's tuning
    int block_m = 0;         // rows per m-block the candidate runs with (0: not applicable)
    std::string schedule;    // the candidate's path / schedule, e.g. "decode", "fused", "prefill"
    double median_us = 0, min_us = 0, max_us = 0;
    int reps = 0;
    double bytes = 0;        // bytes a call must move (weights touched + activations), for bandwidth plots
};

struct MWindow {
    ShapeKey shape;
    int64_t m_lo = 0, m_hi = 0;  // inclusive
    int64_t bucket = 0;          // the M its kernels are built for (the descriptor's M-bucket)
    std::string config;
    int block_m = 0;
    std::string schedule;
    double us = 0;               // the config's median at m_hi
};

struct TokeWindow {
    ShapeKey shape;
    double tok_lo = 0, tok_hi = 0;  // routed tokens per expert, inclusive
    int block_m = 0;
    std::string schedule;
    std::string config;
};

}  // namespace kiln::autotune
