#!/usr/bin/env python3
"""The public peer for the KDA families: fla-core's chunk_kda and fused_recurrent_kda at the K3 TP8 per-GPU
shapes (12 heads, K = V = 128), timed with CUDA events (median of 20 after warm-up), inputs in bf16 and the
state in fp32, the gate computed in the kernel with K3's safe lower bound (-5).

    fla_kda_peer.py [--json FILE]
Needs torch and triton (present on the GPU host) and the fla-core wheel (pip install fla-core==0.6.0).
"""
import argparse
import json

import torch
from fla.ops.kda import chunk_kda, fused_recurrent_kda

H, K = 12, 128


def timed(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    ts.sort()
    return ts[len(ts) // 2]


def inputs(T, N):
    dev = "cuda"
    q = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    g = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    beta = torch.randn(1, T, H, device=dev, dtype=torch.bfloat16)
    A_log = torch.rand(H, device=dev, dtype=torch.float32)
    dt_bias = torch.randn(H * K, device=dev, dtype=torch.float32) * 0.1
    h0 = torch.randn(N, H, K, K, device=dev, dtype=torch.float32) * 0.1
    cu = torch.arange(0, T + 1, T // N, device=dev, dtype=torch.long)
    return q, k, v, g, beta, A_log, dt_bias, h0, cu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default="")
    a = p.parse_args()
    rows = []
    common = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                  safe_gate=True, lower_bound=-5.0, output_final_state=True)
    for T, N in ((8192, 1), (8192, 16)):
        q, k, v, g, beta, A_log, dt_bias, h0, cu = inputs(T, N)
        cu_cpu = cu.cpu()
        us = timed(lambda: chunk_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, initial_state=h0,
                                     cu_seqlens=cu if N > 1 else None, cu_seqlens_cpu=cu_cpu if N > 1 else None,
                                     **common))
        rows.append({"op": "chunk_kda", "T": T, "seqs": N, "us": us})
    common_d = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                    lower_bound=-5.0, output_final_state=True)
    for B in (1, 256):
        q, k, v, g, beta, A_log, dt_bias, h0, _ = inputs(B, B)
        q, k, v, g, beta = (x.view(B, 1, *x.shape[2:]) for x in (q, k, v, g, beta))
        us = timed(lambda: fused_recurrent_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, initial_state=h0,
                                               **common_d))
        state_bytes = 2 * B * H * K * K * 4
        rows.append({"op": "fused_recurrent_kda", "B": B, "us": us,
                     "state_floor_us": state_bytes / 4.8e12 * 1e6})
    for r in rows:
        print(json.dumps(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
