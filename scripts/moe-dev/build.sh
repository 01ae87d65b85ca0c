#!/usr/bin/env bash
# Builds the moe_w4a16 development harness with nvcc (no GPU needed): build.sh OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: build.sh OUT_DIR}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$out"
"$nvcc" -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo \
  -I"$root/templates" -I"$root/templates/device" -I"$root" \
  -Xcompiler -pthread -Xptxas -v \
  "$root/scripts/moe-dev/moe_harness.cu" "$root/jit/moe_w4a16_weights.cpp" \
  -o "$out/moe_harness" -Xcompiler -static-libstdc++,-static-libgcc 2> "$out/ptxas.log" || { cat "$out/ptxas.log" >&2; exit 1; }
grep -E "error|spill" "$out/ptxas.log" | grep -v " 0 bytes spill" | head -20 || true
