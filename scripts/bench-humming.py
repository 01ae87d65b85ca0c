#!/usr/bin/env python3
"""Baseline for `kiln bench moe`: humming-kernels (0.1.10) on the same scenarios, shapes and routing.

Reads the routing that kiln's benchmark wrote (--routing-dir: NAME.json, NAME.ids int32 [M, topk] with -1
for experts of other ranks, NAME.weights fp32 [M, topk]) and kiln's results (--kiln-json), builds
Humming's indexed MoE layers (compressed-tensors pack-quantized INT4 or mxfp4-pack-quantized weights,
random values, the same number of rotated weight copies as kiln so weights are not L2-resident), and
times gate_up + down with CUDA events (median). The activation between them and the top-k combine
after them are timed separately (Humming does not fuse them). Prints one line per scenario and a
comparison table; --json writes the numbers. With kiln's --warm-ms (or --warm-ms here), each scenario first
runs back to back for that long, so both are timed at the board's power limit.

Environment: HUMMING_CACHE_DIR / HUMMING_TMP_DIR should point at writable scratch directories.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def weight_config(fmt):
    if fmt == "int4_g32_bf16":
        return {"quant_method": "compressed-tensors", "format": "pack-quantized", "type": "int", "num_bits": 4,
                "strategy": "group", "group_size": 32, "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized", "type": "float", "num_bits": 4,
            "strategy": "group", "group_size": 32, "symmetric": True}


def make_layer(torch, HummingLayer, fmt, n, k, experts, seed):
    with torch.device("cuda"):
        layer = HummingLayer(shape_n=n, shape_k=k, weight_config=weight_config(fmt), num_experts=experts,
                             torch_dtype=torch.bfloat16)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    for name, p in layer.named_parameters():
        d = p.data
        if name == "weight_shape":
            d.copy_(torch.tensor([n, k], dtype=d.dtype, device="cuda").expand_as(d))
        elif name == "weight_scale":
            if d.dtype == torch.uint8:
                d.copy_(torch.randint(117, 122, d.shape, dtype=torch.uint8, device="cuda", generator=gen))
            else:
                d.copy_((torch.rand(d.shape, device="cuda", generator=gen) * 0.008 + 0.004).to(d.dtype))
        elif d.dtype == torch.int32:
            d.copy_(torch.randint(-2**31, 2**31 - 1, d.shape, dtype=torch.int32, device="cuda", generator=gen))
        elif d.dtype == torch.uint8:
            d.copy_(torch.randint(0, 256, d.shape, dtype=torch.uint8, device="cuda", generator=gen))
        else:
            raise SystemExit(f"unexpected parameter {name} {d.dtype}")
    layer.transform()
    return layer


def align(torch, ids, experts, block):
    """moe_align_block_size: per-expert slot lists padded to `block` with the sentinel M*topk."""
    flat = ids.view(-1)
    sentinel = flat.numel()
    parts, blocks = [], []
    for e in range(experts):
        idx = torch.nonzero(flat == e).view(-1).to(torch.int32)
        if idx.numel() == 0:
            continue
        nb = math.ceil(idx.numel() / block)
        pad = nb * block - idx.numel()
        parts.append(torch.nn.functional.pad(idx, (0, pad), value=sentinel))
        blocks += [e] * nb
    if not parts:
        parts = [torch.full((block,), sentinel, dtype=torch.int32, device=ids.device)]
        blocks = [0]
    sorted_ids = torch.cat(parts).to(torch.int32).contiguous()
    expert_ids = torch.tensor(blocks, dtype=torch.int32, device=ids.device)
    ntp = torch.tensor([sorted_ids.numel()], dtype=torch.int32, device=ids.device)
    return sorted_ids, expert_ids, ntp


def situ_and_mul(torch, g, u):
    return (4.0 * torch.tanh(g / 4.0) * torch.sigmoid(g)) * (25.0 * torch.tanh(u / 25.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routing-dir", required=True)
    ap.add_argument("--kiln-json", required=True)
    ap.add_argument("--json", default="")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--only", default="")
    ap.add_argument("--warm-ms", type=int, default=-1,
                    help="run each scenario back to back this long before timing it (default: kiln's warm_ms)")
    args = ap.parse_args()

    kiln_all = json.load(open(args.kiln_json))
    kiln_all = [k for k in kiln_all if args.only in k["name"]]
    # kiln may list several variants per scenario: Humming runs each scenario once, decode scenarios first
    # (printed as they finish, so a time limit still leaves the decode comparison)
    seen = set()
    kiln = []
    for k in sorted(kiln_all, key=lambda k: not k.get("decode", False)):
        if k["name"] not in seen:
            seen.add(k["name"])
            kiln.append(k)
    compute_config = {"gemm_type": "indexed"}
    results = []
    for phase in (True, False):
        run_phase(args, [k for k in kiln if bool(k.get("decode", False)) == phase], compute_config, results)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    by_name = {r["name"]: r for r in results}
    print()
    print(f"{'scenario':<22} {'variant':<6} {'rows/E':>7} {'kiln us':>9} {'TB/s':>6} {'%4.8':>6} {'TFLOP/s':>8} "
          f"{'humming us':>11} {'x':>6} {'hum+act+sum':>12} {'x e2e':>6} {'kiln call us':>12} {'%4.8':>6} {'kiln fwd us':>11} "
          f"{'kiln sust us':>12}")
    for kr in kiln_all:
        r = by_name.get(kr["name"])
        if r is None:
            continue
        us = kr["us"]
        rows_e = kr["rows"] / max(1, kr["active"])
        e2e = r["us"] + r["us_act_combine"]
        print(f"{kr['name']:<22} {kr.get('variant', ''):<6} {rows_e:7.2f} {us:9.1f} {kr['bytes'] / us / 1e6:6.2f} "
              f"{100 * kr['floor_us'] / us:5.1f}% {kr['flops'] / us / 1e6:8.1f} {r['us']:11.1f} {r['us'] / us:6.2f} "
              f"{e2e:12.1f} {e2e / us:6.2f} {kr.get('us_call', float('nan')):12.1f} "
              f"{100 * kr['floor_us'] / kr.get('us_call', float('nan')):5.1f}% {kr.get('us_forward', float('nan')):11.1f} "
              f"{kr.get('us_sustained', float('nan')):12.1f}")
    return 0


def run_phase(args, kiln, compute_config, results):
    if not kiln:
        return
    import torch
    from humming.kernel.humming import HummingKernel
    from humming.layer import HummingLayer
    from humming import ops
    from humming.tune import get_heuristics_config

    t0 = time.time()
    plans = []
    for kr in kiln:
        meta = json.load(open(os.path.join(args.routing_dir, kr["name"] + ".json")))
        M, topk, E, H, I = meta["M"], meta["topk"], meta["E"], meta["H"], meta["I"]
        ids = torch.from_numpy(
            __import__("numpy").fromfile(os.path.join(args.routing_dir, kr["name"] + ".ids"), dtype="int32")
        ).view(M, topk).cuda()
        wts = torch.from_numpy(
            __import__("numpy").fromfile(os.path.join(args.routing_dir, kr["name"] + ".weights"), dtype="float32")
        ).view(M, topk).cuda()
        copies = int(kr.get("copies", 2))
        gu = [make_layer(torch, HummingLayer, meta["format"], 2 * I, H, E, 11 + c) for c in range(copies)]
        dn = [make_layer(torch, HummingLayer, meta["format"], H, I, E, 101 + c) for c in range(copies)]
        valid_m = M * topk
        mgu, mdn = gu[0].humming_metas[""], dn[0].humming_metas[""]
        cfg_gu = dict(get_heuristics_config(mgu, shape_m=valid_m, gemm_type="indexed"))
        cfg_dn = dict(get_heuristics_config(mdn, shape_m=valid_m, gemm_type="indexed"))
        bm = cfg_gu["block_shape"][0]
        if cfg_dn["block_shape"][0] != bm:  # the routing is aligned once, with the gate_up block (as vLLM does)
            print(f"# {kr['name']}: down block_m {cfg_dn['block_shape'][0]} -> {bm}", flush=True)
            bs, ws = list(cfg_dn["block_shape"]), list(cfg_dn["warp_shape"])
            bs[0] = bm
            ws[0] = min(ws[0], bm) if bm % min(ws[0], bm) == 0 else bm
            cfg_dn["block_shape"], cfg_dn["warp_shape"] = tuple(bs), tuple(ws)
        plans.append(dict(kr=kr, meta=meta, M=M, topk=topk, E=E, H=H, I=I, ids=ids, wts=wts, gu=gu, dn=dn,
                          cfg_gu=cfg_gu, cfg_dn=cfg_dn, bm=bm, copies=copies))
    t1 = time.time()

    # Compile every kernel in parallel (loading must happen on the main thread).
    def kernel_kwargs(meta_obj, cfg):
        lc = json.loads(meta_obj.to_str())
        lc.pop("sublayer_name", None)
        tc = json.loads(json.dumps(cfg))
        tc.pop("num_sms", None)
        return lc | json.loads(json.dumps(compute_config)) | tc

    jobs = []
    for p in plans:
        jobs.append(kernel_kwargs(p["gu"][0].humming_metas[""], p["cfg_gu"]))
        jobs.append(kernel_kwargs(p["dn"][0].humming_metas[""], p["cfg_dn"]))
    dev = torch.cuda.current_device()
    with ThreadPoolExecutor(max_workers=16, initializer=torch.cuda.set_device, initargs=(dev,)) as ex:
        kernels = list(ex.map(lambda kw: HummingKernel(**kw), jobs))
    for k in kernels:
        k.load_cubin()
    t2 = time.time()
    print(f"# humming: layers {t1 - t0:.1f} s, compile {t2 - t1:.1f} s ({len(jobs)} kernels)", flush=True)

    for p in plans:
        M, topk, H, I = p["M"], p["topk"], p["H"], p["I"]
        sorted_ids, expert_ids, ntp = align(torch, p["ids"], p["E"], p["bm"])
        x = torch.randn(M, H, dtype=torch.bfloat16, device="cuda")
        gu_out = torch.empty(M * topk, 2 * I, dtype=torch.bfloat16, device="cuda")
        dn_out = torch.zeros(M * topk, H, dtype=torch.bfloat16, device="cuda")
        wts = torch.where(p["ids"] >= 0, p["wts"], torch.zeros_like(p["wts"])).contiguous()
        act = situ_and_mul if p["meta"]["act"] == 1 else (lambda t, g, u: torch.nn.functional.silu(g) * u)
        h = act(torch, gu_out[:, :I].float(), gu_out[:, I:].float()).to(torch.bfloat16).contiguous()
        h.zero_()

        def gate_up(c):
            p["gu"][c](inputs=x, outputs=gu_out, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp,
                       top_k=topk, compute_config=compute_config, tuning_config=p["cfg_gu"])

        def down(c):
            p["dn"][c](inputs=h, outputs=dn_out, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp,
                       top_k=1, compute_config=compute_config, tuning_config=p["cfg_dn"])

        def post():
            a = act(torch, gu_out[:, :I], gu_out[:, I:])
            ops.moe_fused_mul_sum(dn_out.view(M, topk, H), wts)
            return a

        for c in range(3):
            gate_up(c % p["copies"])
            down(c % p["copies"])
            post()
        torch.cuda.synchronize()
        warm_ms = args.warm_ms if args.warm_ms >= 0 else int(p["kr"].get("warm_ms", 0))
        t_warm = time.time()
        while (time.time() - t_warm) * 1e3 < warm_ms:  # the same sustained state as kiln's --warm-ms
            for c in range(p["copies"]):
                gate_up(c)
                down(c)
                post()
            torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4 * args.iters)]
        for it in range(args.iters):
            c = it % p["copies"]
            ev[4 * it].record()
            gate_up(c)
            ev[4 * it + 1].record()
            down(c)
            ev[4 * it + 2].record()
            post()
            ev[4 * it + 3].record()
        torch.cuda.synchronize()
        gu_us = statistics.median(ev[4 * i].elapsed_time(ev[4 * i + 1]) * 1e3 for i in range(args.iters))
        dn_us = statistics.median(ev[4 * i + 1].elapsed_time(ev[4 * i + 2]) * 1e3 for i in range(args.iters))
        tot_us = statistics.median(ev[4 * i].elapsed_time(ev[4 * i + 2]) * 1e3 for i in range(args.iters))
        post_us = statistics.median(ev[4 * i + 2].elapsed_time(ev[4 * i + 3]) * 1e3 for i in range(args.iters))
        r = dict(name=p["kr"]["name"], us=tot_us, us_gate_up=gu_us, us_down=dn_us, us_act_combine=post_us, warm_ms=warm_ms,
                 block_m=p["bm"], cfg_gate_up=str(p["cfg_gu"]), cfg_down=str(p["cfg_dn"]))
        results.append(r)
        print(f"# humming {r['name']:<22} gate_up {gu_us:8.1f} us  down {dn_us:8.1f} us  gate_up+down {tot_us:8.1f} us"
              f"  (+act/combine {post_us:6.1f} us)  block_m {p['bm']}", flush=True)
        del p["gu"], p["dn"]
        torch.cuda.empty_cache()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
