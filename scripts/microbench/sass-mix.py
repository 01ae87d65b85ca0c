#!/usr/bin/env python3
"""Instruction mix of the MMA loop of every kernel in a cubin, per MMA instruction, by pipe.

usage: scripts/microbench/sass-mix.py KERNELS.cubin | nvdisasm-output.txt

Reads `nvdisasm` output (runs nvdisasm on a .cubin itself) and, for every function, sums the opcodes of
the basic blocks that contain an HMMA (the decode consumers' main loop: dequantisation + mma.sync), then
prints each opcode per HMMA and the issue cycles per HMMA that the integer ALU pipe (16 lanes per
cycle) and the FMA-heavy pipe (16 lanes: IMAD*, HMUL2 / HADD2 / HFMA2) need. One decode weight word per
lane is one HMMA per token tile. How to make the cubin: compile a file that includes the template and
instantiates the kernel, e.g. `nvcc -arch=sm_90a -cubin -std=c++17 -Itemplates -o k.cubin k.cu`.
"""
import collections
import re
import subprocess
import sys

ALU = {"LOP3", "SHF", "LEA", "PRMT", "ISETP", "IADD3", "SEL", "PLOP3", "VIADD", "IABS", "IMNMX", "VIMNMX",
       "FLO", "POPC", "BMSK", "SGXT", "LOP"}
HEAVY = {"IMAD", "HMUL2", "HADD2", "HFMA2"}
# IMAD.HI / IMAD.WIDE produce 64-bit products: measured to cost about two IMADs
WIDE = ("IMAD.HI", "IMAD.WIDE")


def disassemble(path):
    if path.endswith(".cubin"):
        return subprocess.run(["nvdisasm", path], check=True, capture_output=True, text=True).stdout.splitlines()
    return open(path).read().splitlines()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    blocks = {}
    fn = None
    for line in disassemble(sys.argv[1]):
        m = re.match(r"\.text\.(\S+):", line)
        if m:
            fn = m.group(1)
            blocks[fn] = [collections.Counter()]
            continue
        if fn is None:
            continue
        if re.match(r"\.L_x_\d+:", line):
            blocks[fn].append(collections.Counter())
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
        if m:
            op = m.group(2)
            base = op.split(".")[0]
            blocks[fn][-1][".".join(op.split(".")[:2]) if base in ("IMAD", "SHF") else base] += 1
    for fn, bl in blocks.items():
        mix = collections.Counter()
        for b in bl:
            if b["HMMA"]:
                mix += b
        n = mix["HMMA"]
        if not n:
            continue
        alu = sum(v for k, v in mix.items() if k.split(".")[0] in ALU)
        heavy = sum(v * (2 if k.startswith(WIDE) else 1) for k, v in mix.items() if k.split(".")[0] in HEAVY)
        print(f"{fn}\n  per HMMA: {sum(mix.values()) / n:.2f} instructions; ALU pipe {2 * alu / n:.1f} cycles, "
              f"FMA-heavy pipe {2 * heavy / n:.1f} cycles")
        print("  " + " ".join(f"{k}:{v / n:.2f}" for k, v in mix.most_common(14)))


if __name__ == "__main__":
    main()
