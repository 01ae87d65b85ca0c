#!/usr/bin/env python3
"""Plots of a kiln tune DB, from the JSON `kiln tune show DB --json` prints (`kiln tune show DB --plot DIR`
runs this with DIR/tune.json).

Writes into OUT_DIR, per tuned shape:
  <shape>.configs.png   each candidate's median time against tokens per call (log-log), the fitted M-windows
                        shaded and labelled with their winner, and the bandwidth roofline (the bytes a call
                        must move over the SKU's memory bandwidth, when known)
  <shape>.toke.png      the tok_e windows: block_m and schedule by routed tokens per expert
and, when the DB holds one, verify_cost.png: the verification-cost staircase, one line per request count
(monotone, measured values as dots).
Usage: plot-tune.py TUNE_JSON OUT_DIR
"""
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Memory bandwidth by device name, bytes/s (datasheet numbers), for the roofline.
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "B200": 8.0e12}


def bandwidth(sku):
    if sku.get("kind") != "cuda":
        return None
    for key, bw in BANDWIDTH.items():
        if key in sku.get("name", ""):
            return bw
    return None


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def plot_configs(shape, ms, windows, sku, out):
    fig, ax = plt.subplots(figsize=(11, 6))
    by_config = {}
    for m in ms:
        by_config.setdefault(m["config"], []).append(m)
    for config, pts in sorted(by_config.items()):
        pts.sort(key=lambda p: p["m"])
        label = f'{pts[0]["schedule"]} bm{pts[0]["block_m"]}: {config}'
        ax.plot([p["m"] for p in pts], [p["median_us"] for p in pts], marker=".", linewidth=0.8, label=label)
    bw = bandwidth(sku)
    if bw:
        floor = sorted({(p["m"], p["bytes"]) for p in ms})
        ax.plot([m for m, _ in floor], [b / bw * 1e6 for _, b in floor], "k--", linewidth=1.5, label="memory roofline")
    for i, w in enumerate(windows):
        ax.axvspan(w["m_lo"], w["m_hi"] + 1, alpha=0.08 if i % 2 else 0.16, color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per call (M)")
    ax.set_ylabel("median us per call")
    ax.set_title(f"{shape} on {sku.get('name', '?')}")
    ymin, ymax = ax.get_ylim()
    for w in windows:
        ax.text(w["m_lo"], ymax / 1.15, f'{w["schedule"]}\nbm{w["block_m"]}', fontsize=7, va="top")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_toke(shape, toke, out):
    fig, ax = plt.subplots(figsize=(9, 3.5))
    schedules = sorted({w["schedule"] for w in toke})
    colors = {s: plt.cm.tab10(i) for i, s in enumerate(schedules)}
    for w in toke:
        lo, hi = w["tok_lo"], max(w["tok_hi"], w["tok_lo"] * 1.05)
        ax.barh(0, hi - lo, left=lo, color=colors[w["schedule"]], edgecolor="k")
        ax.text((lo * hi) ** 0.5, 0, f'bm{w["block_m"]}', ha="center", va="center", fontsize=8)
    for s in schedules:
        ax.barh(0, 0, color=colors[s], label=s)
    ax.set_xscale("log")
    ax.set_yticks([])
    ax.set_xlabel("routed tokens per expert (tok_e)")
    ax.set_title(f"tok_e windows: {shape}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_verify_cost(vc, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    tokens = vc["tokens"]
    cells = {(c["requests"], c["tokens"]): c for c in vc["cells"]}
    for r in vc["requests"]:
        ax.step(tokens, [cells[(r, t)]["ms"] for t in tokens], where="post", label=f"{r} requests")
        ax.plot(tokens, [cells[(r, t)]["measured_ms"] for t in tokens], ".", color=ax.lines[-1].get_color())
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per request")
    ax.set_ylabel("ms per verify step (monotone; dots: measured)")
    ax.set_title("verification-cost staircase")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(path, out_dir):
    with open(path) as f:
        db = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    shapes = sorted({m["shape"]["text"] for m in db["measurements"]})
    for shape in shapes:
        ms = [m for m in db["measurements"] if m["shape"]["text"] == shape]
        windows = sorted((w for w in db["m_windows"] if w["shape"]["text"] == shape), key=lambda w: w["m_lo"])
        out = os.path.join(out_dir, slug(shape) + ".configs.png")
        plot_configs(shape, ms, windows, db["sku"], out)
        written.append(out)
        toke = [w for w in db["toke_windows"] if w["shape"]["text"] == shape]
        if toke:
            out = os.path.join(out_dir, slug(shape) + ".toke.png")
            plot_toke(shape, toke, out)
            written.append(out)
    if db.get("verify_cost"):
        out = os.path.join(out_dir, "verify_cost.png")
        plot_verify_cost(db["verify_cost"], out)
        written.append(out)
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
