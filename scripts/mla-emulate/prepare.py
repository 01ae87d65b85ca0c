#!/usr/bin/env python3
"""Copies templates/ to OUT and swaps the inline-PTX helpers of the MLA device templates (cp.async, ldmatrix,
mma.sync) for calls into the host emulation (scripts/mla-emulate/emulate.cpp). The kernels themselves are
compiled unchanged. Fails if a helper is not where it is expected."""
import shutil
import sys
from pathlib import Path


def swap(path: Path, start: str, end: str, text: str) -> None:
    s = path.read_text()
    a, b = s.find(start), s.find(end)
    if a < 0 or b < 0 or b < a:
        sys.exit(f"mla-emulate: {path}: the helpers between '{start}' and '{end}' moved; update prepare.py")
    path.write_text(s[:a] + text + s[b:])


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    dev = out / "device"
    swap(dev / "mla_attention.cuh", "__device__ __forceinline__ void cp_async16(", "// One CTA's work",
         "__device__ __forceinline__ void cp_async16(void* s, const void* g, bool ok) { emu_cp_async16(s, g, ok); }\n"
         "__device__ __forceinline__ void cp_async_commit() { emu_commit(); }\n"
         "template <int N>\n__device__ __forceinline__ void cp_async_wait() { emu_wait(N); }\n\n")
    swap(dev / "mla_attention_mma.cuh", "__device__ __forceinline__ void ldsm_x4(",
         "__device__ __forceinline__ u32 pack_bf16(",
         "__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const void* p) { emu_ldsm(r, p, false); }\n"
         "__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], const void* p) { emu_ldsm(r, p, true); }\n"
         "__device__ __forceinline__ void mma_bf16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) "
         "{ emu_mma(c, a, b0, b1); }\n")


if __name__ == "__main__":
    main()
