// The sweep driver: times every candidate config of a family at every M of a sweep case on a backend and
// records the medians in the tune DB, then fits the case's windows (autotune/windows.hpp).
//
// A case names the shape, the Ms and the candidates; its `prepare` builds what one candidate needs at one M
// (kernels, inputs, `copies()` copies of the weights) and returns a SweepRun, or nullptr when the candidate
// cannot run at that M. Timing goes through runtime::Event on the given stream: `warmup` untimed calls,
// then `reps` calls, each between two events, call i reading weight copy i % copies() so weights come from
// memory rather than a cache that still holds them; the median, min and max of the reps are recorded.
// Points already in the DB are skipped (resume); each point commits on its own. Families with their own
// inputs live above autotune/ (the MoE layer's case is model/tune/moe_w4a16_sweep.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "autotune/tune_db.hpp"
#include "autotune/windows.hpp"
#include "runtime/backend.hpp"

namespace kiln::autotune {

class SweepRun {
public:
    virtual ~SweepRun() = default;
    virtual int copies() const = 0;  // weight copies the calls rotate over (>= 1)
    // Enqueues one call reading weight copy `copy` (0 <= copy < copies()).
    virtual void enqueue(runtime::Stream& s, int copy) = 0;
    virtual double bytes() const { return 0; }  // bytes one call must move
};

struct SweepCandidate {
    std::string config;    // the tuning fields it sets, "name=value,..."
    int block_m = 0;
    std::string schedule;  // its path / schedule
};

struct SweepCase {
    ShapeKey shape;
    std::vector<int64_t> ms;  // ascending, >= 1
    std::vector<SweepCandidate> candidates;
    std::function<std::unique_ptr<SweepRun>(const SweepCandidate&, int64_t m)> prepare;
    BucketOf bucket_of;  // nullptr: a window's bucket is its last M
};

struct SweepOptions {
    int warmup = 3;
    int reps = 15;
    double tolerance = 0.03;  // window fitting (autotune/windows.hpp)
};

struct SweepProgress {
    size_t done = 0;      // points finished, resumed ones included
    size_t total = 0;
    size_t resumed = 0;   // of done: found in the DB
    double elapsed_s = 0;
    double eta_s = -1;    // -1 until a point has been timed in this run
    std::string point;    // "moe_w4a16/layer ... m=8 tiles=2,..."
};
using SweepProgressFn = std::function<void(const SweepProgress&)>;

struct SweepSummary {
    size_t measured = 0, resumed = 0, unsupported = 0;
    std::vector<MWindow> windows;
};

// Every point of the cases in order (the progress callback runs after each; an exception from it or from a
// case stops the sweep with the finished points kept), then the windows of every case with measurements.
// Throws InvalidArgument for a case without Ms or candidates, or with Ms not ascending from 1.
SweepSummary run_sweep(TuneDb& db, runtime::Backend& backend, std::span<const SweepCase> cases,
                       const SweepOptions& options, const SweepProgressFn& progress = nullptr);

// Fits and stores the windows of `shape` from the DB's measurements; returns them (empty without any).
std::vector<MWindow> refit_windows(TuneDb& db, const ShapeKey& shape, double tolerance, const BucketOf& bucket_of = nullptr);

// Weight copies to rotate: enough that the copies together are at least 4x `cache_bytes` (so a call never
// finds its weights cached), at least 2, at most 64 and at most `budget_bytes` in total (at least 1).
int rotation_copies(double bytes_per_copy, uint64_t cache_bytes, uint64_t budget_bytes);

// The median of `v` (the upper one of an even count); 0 for none.
double median(std::vector<double> v);

}  // namespace kiln::autotune
