#!/usr/bin/env bash
# Builds the moe_w4a16 development harness with nvcc (no GPU needed): build.sh OUT_DIR
# The decode GEMM instantiations are split by weight format and compiled in parallel (JOBS, default 2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: build.sh OUT_DIR}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
jobs=${JOBS:-2}
mkdir -p "$out/obj"
flags=(-std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo
       -I"$root/templates" -I"$root/templates/device" -I"$root" -Xcompiler -pthread -Xptxas -v)
srcs=("$root/scripts/moe-dev/moe_harness.cu" "$root/scripts/moe-dev/kernels_int4.cu"
      "$root/scripts/moe-dev/kernels_mxfp4.cu" "$root/scripts/moe-dev/kernels_mxfp4w.cu"
      "$root/scripts/moe-dev/kernels_prefill_int4.cu" "$root/scripts/moe-dev/kernels_prefill_mxfp4.cu"
      "$root/jit/moe_w4a16_weights.cpp")
printf '%s\n' "${srcs[@]}" | xargs -P "$jobs" -I{} sh -c \
  'f={}; b=$(basename "$f"); "$0" "$@" -c "$f" -o "'"$out"'/obj/$b.o" 2> "'"$out"'/obj/$b.log" || { cat "'"$out"'/obj/$b.log" >&2; exit 255; }' \
  "$nvcc" "${flags[@]}"
cat "$out"/obj/*.log > "$out/ptxas.log"
"$nvcc" -gencode=arch=compute_90a,code=sm_90a -o "$out/moe_harness" "$out"/obj/*.o -Xcompiler -static-libstdc++,-static-libgcc
grep -E "error|spill" "$out/ptxas.log" | grep -v " 0 bytes spill" | head -20 || true
