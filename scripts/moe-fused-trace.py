#!/usr/bin/env python3
"""Summarise `kiln bench moe --trace-dir DIR` output: one fused decode call's item completion times.

usage: scripts/moe-fused-trace.py DIR/NAME.trace.json...

Prints, per file, when the waves of gate_up items completed (first / median / last of each group of
4 x CTAs items: one per warp group), the down items' completion spread, and the rates these imply.
"""
import json
import sys


def summarise(path):
    j = json.load(open(path))
    kind, done, start = j["kind"], j["done_us"], j["start_us"]
    groups = 4 * len(start)  # four warp groups per CTA, one CTA per SM
    gb, db = j["gate_up_item_bytes"], j["down_item_bytes"]
    gu = sorted(t for t, k in zip(done, kind) if k == 0)
    dn = sorted(t for t, k in zip(done, kind) if k == 1)
    total = gb * len(gu) + db * len(dn)
    end = max(done)
    print(f"{path}: {len(gu)} gate_up items ({gb / 1e3:.0f} KB), {len(dn)} down items ({db / 1e3:.0f} KB); "
          f"CTA starts {min(start):.1f}-{max(start):.1f} us; last item {end:.1f} us: {total / end / 1e6:.2f} TB/s")
    waves = [gu[i:i + groups] for i in range(0, len(gu), groups)]
    for n, w in enumerate(waves):
        print(f"  gate_up wave {n}: {len(w)} items done {w[0]:.1f} / {w[len(w) // 2]:.1f} / {w[-1]:.1f} us")
    if len(waves) > 1:
        per = (waves[1][len(waves[1]) // 2] - waves[0][len(waves[0]) // 2])
        print(f"  wave period {per:.1f} us: {groups * gb / per / 1e6:.2f} TB/s while gate_up streams")
    if dn:
        q = lambda f: dn[min(len(dn) - 1, int(f * len(dn)))]
        mid = (q(0.75) - q(0.25))
        print(f"  down done: first {dn[0]:.1f}, 25% {q(0.25):.1f}, 50% {q(0.5):.1f}, 90% {q(0.9):.1f}, "
              f"last {dn[-1]:.1f} us; 25-75%: {0.5 * len(dn) * db / mid / 1e6:.2f} TB/s")
    if "routed_us" in j:
        routed, ends = j["routed_us"], j["end_us"]
        print(f"  routing done in the CTAs {min(routed):.1f}-{max(routed):.1f} us; CTAs end (combine included) "
              f"{min(ends):.1f} / {sorted(ends)[len(ends) // 2]:.1f} / {max(ends):.1f} us, "
              f"{max(ends) - end:.1f} us after the last item")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        summarise(p)
