#!/usr/bin/env bash
# One GPU run for the moe_w4a16 kernels: SASS summary, correctness, benchmarks, Humming baseline.
#   gpu-run.sh HARNESS_DIR WHEEL_DIR [steps]    steps: any of sass,test,real,bench,humming (default all)
# Logs go to $OUT (or a new temporary directory); the last lines printed are the comparison table.
set -u
dir=$(cd "$1" && pwd)
whl=$(cd "$2" && pwd)
steps=${3:-sass,test,real,bench,humming,ncu}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
humming_script="$here/bench-humming.py"
[[ -f "$humming_script" ]] || humming_script="$here/../bench-humming.py"
out=${OUT:-$(mktemp -d)}
scratch=$(mktemp -d)
mkdir -p "$out" "$scratch/routing"
has() { [[ ",$steps," == *",$1,"* ]]; }
start=$(date +%s)
stamp() { echo "## $1 at +$(( $(date +%s) - start )) s"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv | tee "$out/gpu.txt"

if has sass; then
  stamp sass
  cuobjdump --dump-sass "$dir/moe_harness" > "$scratch/sass.txt" 2>&1
  awk '/Function :/ {fn=$3} /HMMA/ {h[fn]++} /HGMMA/ {g[fn]++} /LDL|STL/ {l[fn]++} /LDGSTS/ {c[fn]++}
       END {for (f in h) printf "%s HMMA=%d HGMMA=%d LDL/STL=%d LDGSTS=%d\n", f, h[f], g[f]+0, l[f]+0, c[f]+0}' \
      "$scratch/sass.txt" | sort > "$out/sass-summary.txt"
  echo "kernels with HMMA: $(wc -l < "$out/sass-summary.txt"), with local memory: $(awk '$4 != "LDL/STL=0"' "$out/sass-summary.txt" | wc -l)"
fi

rc_test=0
if has test; then
  stamp test
  for t in dequant routing moe; do
    timeout 120 "$dir/moe_harness" test $t 2>&1 | tee -a "$out/test.log" | grep -E "FAIL|failure|error|CUDA" 
    rc=${PIPESTATUS[0]}
    echo "test $t: exit $rc"
    if [[ $rc != 0 ]]; then rc_test=1; fi
  done
  if [[ $rc_test != 0 ]] && command -v compute-sanitizer >/dev/null; then
    stamp sanitizer
    timeout 90 compute-sanitizer --tool memcheck --show-backtrace no "$dir/moe_harness" test moe > "$out/sanitizer.log" 2>&1
    grep -m20 -E "Invalid|ERROR SUMMARY|out of bounds|misaligned" "$out/sanitizer.log"
  fi
fi
if has real; then
  stamp real
  timeout 150 "$dir/moe_harness" test moe-real 2>&1 | tee -a "$out/test.log" | grep -E "PASS|FAIL|failure|CUDA"
fi
if has bench; then
  stamp bench
  timeout 150 "$dir/moe_harness" bench --routing-dir "$scratch/routing" --json "$out/kiln.json" --probe 1 2>&1 | tee "$out/bench.log"
fi
if has humming; then
  stamp humming
  export HUMMING_CACHE_DIR="$scratch/humming-cache" HUMMING_TMP_DIR="$scratch/humming-tmp" PYTHONUNBUFFERED=1
  mkdir -p "$HUMMING_CACHE_DIR" "$HUMMING_TMP_DIR"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$whl"/*.whl > /dev/null 2>&1
  export PYTHONPATH="$scratch/site"
  timeout 240 python3 "$humming_script" --routing-dir "$scratch/routing" --kiln-json "$out/kiln.json" \
      --json "$out/humming.json" > "$out/humming.log" 2>&1
  echo "humming exit $?"
  grep -v "^#" "$out/humming.log" | tail -25
  grep "^# humming:" "$out/humming.log"
fi
if has ncu && command -v ncu >/dev/null; then
  stamp ncu
  timeout 120 ncu --clock-control none -k regex:moe_w4a16_decode --launch-skip 4 --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \
      "$dir/moe_harness" bench --only k2_ep8_decode_20 --iters 2 > "$out/ncu.txt" 2>&1
  echo "ncu exit $?"
  grep -E "moe_w4a16_decode|DRAM Throughput|Memory Throughput|Duration|Issue Slots Busy|Executed Ipc A|No Eligible|Stall" "$out/ncu.txt" | head -30
fi
stamp done
