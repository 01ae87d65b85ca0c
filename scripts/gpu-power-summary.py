#!/usr/bin/env python3
"""The GPU's clock and power state during each phase of a benchmark, from an nvidia-smi log.

usage: scripts/gpu-power-summary.py SMI_LOG PHASES

SMI_LOG: `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu,clocks_event_reasons.active
--format=csv,noheader,nounits -lms 50` output. PHASES: lines "EPOCH_SECONDS NAME", one where each phase
starts, the last one ending the previous phase. Prints, per phase, over the samples with the GPU busy
(utilization >= 50%): the median and minimum SM clock, the median and maximum power, and the share of
samples in which the driver reported its software power cap (event reason bit 0x4) holding the clock
down. A benchmark run under that cap measures the board at its power limit (docs/perf/moe_w4a16.md, "Sustained load").
"""
import datetime
import statistics
import sys


def samples(path):
    out = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 5:
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local time, as date +%s
            out.append((t, float(f[1]), float(f[2]), float(f[3]), int(f[4], 16)))
        except ValueError:
            continue  # "[N/A]" or a header
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = samples(sys.argv[1])
    phases = [(float(p[0]), p[1]) for p in (l.split(None, 1) for l in open(sys.argv[2]) if l.strip())]
    print(f"{'phase':<16} {'busy samples':>12} {'SM MHz median':>13} {'min':>6} {'W median':>9} {'max':>6} {'power-capped':>12}")
    for (a, name), (b, _) in zip(phases, phases[1:]):
        busy = [r for r in rows if a <= r[0] < b and r[3] >= 50]
        if not busy:
            print(f"{name.strip():<16} {0:>12}")
            continue
        capped = 100.0 * sum(1 for r in busy if r[4] & 0x4) / len(busy)
        print(f"{name.strip():<16} {len(busy):>12} {statistics.median(r[1] for r in busy):>13.0f} "
              f"{min(r[1] for r in busy):>6.0f} {statistics.median(r[2] for r in busy):>9.0f} "
              f"{max(r[2] for r in busy):>6.0f} {capped:>11.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
