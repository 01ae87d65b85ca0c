#include "autotune/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::autotune {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

int rotation_copies(double bytes_per_copy, uint64_t cache_bytes, uint64_t budget_bytes) {
    const double per = std::max(1.0, bytes_per_copy);
    int n = static_cast<int>(std::ceil(4.0 * static_cast<double>(cache_bytes) / per));
    n = std::clamp(n, 2, 64);
    const int fit = static_cast<int>(std::min(64.0, static_cast<double>(budget_bytes) / per));
    return std::max(1, std::min(n, fit));
}

namespace {

void check_case(const SweepCase& c) {
    if (c.ms.empty() || c.candidates.empty() || !c.prepare)
        throw InvalidArgument(fmt::format("sweep {}: no sizes, candidates or preparation", c.shape.text()));
    for (size_t i = 0; i < c.ms.size(); ++i)
        if (c.ms[i] < 1 || (i > 0 && c.ms[i] <= c.ms[i - 1]))
            throw InvalidArgument(fmt::format("sweep {}: sizes must ascend from 1", c.shape.text()));
}

Measurement time_point(runtime::Backend& backend, runtime::Stream& stream, SweepRun& run, const SweepOptions& o) {
    const int copies = std::max(1, run.copies());
    for (int i = 0; i < o.warmup; ++i) run.enqueue(stream, i % copies);
    std::vector<std::unique_ptr<runtime::Event>> ev;
    ev.reserve(static_cast<size_t>(o.reps) * 2);
    for (int i = 0; i < 2 * o.reps; ++i) ev.push_back(backend.create_event(true));
    for (int i = 0; i < o.reps; ++i) {
        stream.record(*ev[2 * i]);
        run.enqueue(stream, (o.warmup + i) % copies);
        stream.record(*ev[2 * i + 1]);
    }
    stream.synchronize();
    std::vector<double> us(static_cast<size_t>(o.reps));
    for (int i = 0; i < o.reps; ++i) us[i] = 1e3 * ev[2 * i + 1]->elapsed_ms_since(*ev[2 * i]);
    Measurement m;
    m.median_us = median(us);
    m.min_us = *std::min_element(us.begin(), us.end());
    m.max_us = *std::max_element(us.begin(), us.end());
    m.reps = o.reps;
    m.bytes = run.bytes();
    return m;
}

}  // namespace

std::vector<MWindow> refit_windows(TuneDb& db, const ShapeKey& shape, double tolerance, const BucketOf& bucket_of) {
    std::vector<Measurement> mine;
    for (Measurement& m : db.measurements())
        if (m.shape == shape) mine.push_back(std::move(m));
    if (mine.empty()) return {};
    std::vector<MWindow> w = fit_m_windows(mine, tolerance, bucket_of);
    db.put_windows(w, toke_windows(w));
    return w;
}

SweepSummary run_sweep(TuneDb& db, runtime::Backend& backend, std::span<const SweepCase> cases,
                       const SweepOptions& o, const SweepProgressFn& progress) {
    if (o.reps < 1 || o.warmup < 0) throw InvalidArgument(fmt::format("sweep: reps={} warmup={}", o.reps, o.warmup));
    SweepProgress p;
    for (const SweepCase& c : cases) {
        check_case(c);
        p.total += c.ms.size() * c.candidates.size();
    }
    db.set_meta("sweep.points_total", std::to_string(p.total));
    db.set_meta("sweep.state", "running");
    backend.make_current();
    auto stream = backend.create_stream();
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    double timed_s = 0;
    size_t timed = 0;
    SweepSummary sum;
    for (const SweepCase& c : cases) {
        for (int64_t m : c.ms)
            for (const SweepCandidate& cand : c.candidates) {
                p.point = fmt::format("{} m={} {}", c.shape.text(), m, cand.config);
                if (db.has_measurement(c.shape, m, cand.config)) {
                    ++p.resumed;
                    ++sum.resumed;
                } else {
                    const auto a = clock::now();
                    std::unique_ptr<SweepRun> run = c.prepare(cand, m);
                    if (!run) {
                        ++sum.unsupported;
                    } else {
                        Measurement r = time_point(backend, *stream, *run, o);
                        r.shape = c.shape;
                        r.m = m;
                        r.config = cand.config;
                        r.block_m = cand.block_m;
                        r.schedule = cand.schedule;
                        run.reset();
                        db.put_measurement(r);
                        ++sum.measured;
                    }
                    timed_s += std::chrono::duration<double>(clock::now() - a).count();
                    ++timed;
                }
                ++p.done;
                p.elapsed_s = std::chrono::duration<double>(clock::now() - t0).count();
                p.eta_s = timed ? timed_s / static_cast<double>(timed) * static_cast<double>(p.total - p.done) : -1;
                if (progress) progress(p);
            }
    }
    for (const SweepCase& c : cases) {
        std::vector<MWindow> w = refit_windows(db, c.shape, o.tolerance, c.bucket_of);
        sum.windows.insert(sum.windows.end(), w.begin(), w.end());
    }
    db.set_meta("sweep.state", "complete");
    return sum;
}

}  // namespace kiln::autotune
