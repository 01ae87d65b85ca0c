#!/usr/bin/env python3
"""Comparison table of a development-harness run: summary.py KILN_JSON [HUMMING_JSON] [PASSED_VARIANTS]

One line per (scenario, variant) measured by `moe_harness bench`: total us (routing / gate_up / down),
block_m, TB/s, TFLOP/s, % of the floor (the larger of bytes / 4.8 TB/s and FLOPs / 787 TFLOP/s), and
Humming's gate_up + down divided by kiln's total when the baseline ran. Variants not in PASSED_VARIANTS
(comma separated; default all) are marked as not correct.
"""
import json
import os
import sys

PEAK_FLOPS = 787e12  # measured bf16 dense peak (H200)


def main():
    kiln = json.load(open(sys.argv[1])) if os.path.exists(sys.argv[1]) else []
    hum = {}
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        try:
            hum = {r["name"]: r for r in json.load(open(sys.argv[2]))}
        except ValueError:
            hum = {}
    passed = set(sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[3] else None
    print(f"{'scenario':<20} {'var':<5} {'bm':>3} {'total us':>8} {'route':>6} {'gate_up':>8} {'down':>8} {'TB/s':>5} "
          f"{'TFLOP/s':>7} {'floor':>6} {'%floor':>6} {'hum us':>7} {'x hum':>6}")
    best = {}
    for k in kiln:
        us = k["us"]
        h = hum.get(k["name"])
        ok = passed is None or k.get("variant", "") in passed
        floor = max(k["floor_us"], k["flops"] / PEAK_FLOPS * 1e6)
        ratio = f"{h['us'] / us:6.2f}" if h else "     -"
        hus = f"{h['us']:7.1f}" if h else "      -"
        print(f"{k['name'][:20]:<20} {k.get('variant', ''):<5} {k.get('block_m', 8 * k.get('tiles', 1)):3d} {us:8.1f} "
              f"{k['us_route']:6.1f} {k['us_gate_up']:8.1f} {k['us_down']:8.1f} {k['bytes'] / us / 1e6:5.2f} "
              f"{k['flops'] / us / 1e6:7.1f} {floor:6.1f} {100 * floor / us:5.1f}% {hus} {ratio}"
              f"{'' if ok else '  (failed checks)'}")
        if ok and (k["name"] not in best or us < best[k["name"]]["us"]):
            best[k["name"]] = k
    if best:
        print("best correct variant per scenario: " +
              ", ".join(f"{n} {k.get('variant', '')} {k['us']:.1f}us" for n, k in best.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
