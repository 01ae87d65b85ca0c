#!/usr/bin/env bash
# One GPU run for the moe_w4a16 kernels within a time budget: correctness of every variant first (a
# variant whose kernel hangs is dropped and the others are re-run), benchmarks of the variants that
# passed, then the Humming baseline on the same routing with whatever time is left; the comparison
# table is printed last.
#   gpu-run.sh HARNESS_DIR WHEEL_DIR        (BUDGET seconds, default 250)
# Environment: VARIANTS (checked), DECODE_VARIANTS / PREFILL_VARIANTS (benchmarked; prefill GEMM variants
# p64/p128/pauto in PREFILL_VARIANTS also run on decode scenarios with >= 8 rows per expert), ONLY
# (comma-separated scenario-name substrings to benchmark), SMALL_S / REAL_S / BENCH_S (time limits).
# $OUT receives at most six files: tests.log, bench.log, kiln.json, humming.log, humming.json, gpu.txt.
# HARNESS_DIR holds moe_harness (scripts/moe-dev/build.sh), bench-humming.py and summary.py.
set -u
dir=$(cd "$1" && pwd)
whl=$(cd "$2" && pwd)
budget=${BUDGET:-250}
out=${OUT:-$(mktemp -d)}
scratch=$(mktemp -d)
mkdir -p "$out" "$scratch/routing"
H="$dir/moe_harness"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
stamp() { echo "## $1 at +$(($(date +%s) - start)) s"; }

ALL=${VARIANTS:-auto,v3,v4,v5,v5s,v3r,v5r,v5wr}
DECODE=${DECODE_VARIANTS:-auto,v3,v4,v5r}
PREFILL=${PREFILL_VARIANTS:-auto,v3,v5r,v5wr}

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader \
  | tee "$out/gpu.txt"
logs="$scratch/logs"
mkdir -p "$logs"

stamp "dequant + routing"
for t in dequant routing; do
  timeout -k 3 40 "$H" test $t > "$logs/test-$t.log" 2>&1
  echo "test $t: exit $? ($(grep -c '^PASS' "$logs/test-$t.log") pass, $(grep -c '^FAIL' "$logs/test-$t.log") fail)"
  grep -E '^FAIL|CUDA error' "$logs/test-$t.log" | head -5
  cat "$logs/test-$t.log" >> "$out/tests.log"
done

# run_variants SUITE LIST SECONDS: all variants in one process (one reference per case); a hang (exit
# 4) names the variant, which is marked failed, and the rest run again.
declare -A verdict
run_variants() {
  local suite=$1 list=$2 secs=$3 try=0 rc log
  while [[ -n "$list" && $try -lt 3 ]]; do
    log="$logs/test-$suite-$try.log"
    timeout -k 3 "$secs" "$H" test "$suite" --variants "$list" > "$log" 2>&1
    rc=$?
    { echo "### test $suite --variants $list: exit $rc"; cat "$log"; } >> "$out/tests.log"
    echo "test $suite [$list]: exit $rc ($(grep -c '^PASS' "$log") pass, $(grep -c '^FAIL' "$log") fail)"
    grep -E '^FAIL|^HANG|CUDA error' "$log" | head -8
    if [[ $rc == 4 ]]; then
      local hung
      hung=$(grep -m1 '^HANG' "$log" | awk '{print $2}')
      verdict[$hung]=HANG
      list=$(echo ",$list," | sed "s/,$hung,/,/; s/^,//; s/,$//")
      try=$((try + 1))
      continue
    fi
    local v
    for v in ${list//,/ }; do
      if grep -q "^VARIANT $v PASS" "$log"; then
        [[ -z "${verdict[$v]:-}" ]] && verdict[$v]=PASS
      else
        verdict[$v]=FAIL
      fi
    done
    break
  done
  local v
  for v in ${list//,/ }; do [[ -z "${verdict[$v]:-}" ]] && verdict[$v]=FAIL; done
}

stamp "correctness: small cases"
run_variants moe "$ALL" ${SMALL_S:-70}
passed=$(for v in ${ALL//,/ }; do [[ ${verdict[$v]:-} == PASS ]] && printf '%s,' "$v"; done | sed 's/,$//')
stamp "correctness: real shapes"
[[ -n "$passed" ]] && run_variants moe-real "$passed" ${REAL_S:-90}
passed=$(for v in ${ALL//,/ }; do [[ ${verdict[$v]:-} == PASS ]] && printf '%s,' "$v"; done | sed 's/,$//')
for v in ${ALL//,/ }; do echo "variant $v: ${verdict[$v]:-not run}"; done

pick() {  # variants of $1 that passed (v5x rides on v5: same kernels, another claim order)
  local v r=""
  for v in ${1//,/ }; do
    local base=$v
    [[ $v == v5x || $v == v5w ]] && base=v5
    [[ ,$passed, == *",$base,"* ]] && r="$r,$v"
  done
  echo "${r#,}"
}
dec=$(pick "$DECODE")
pre=$(pick "$PREFILL")
if [[ -n "$dec$pre" ]]; then
  stamp "bench (decode: ${dec:-none}; prefill: ${pre:-none})"
  bs=${BENCH_S:-100}
  timeout -k 3 $(( $(left) > bs + 10 ? bs : $(left) - 10 )) "$H" bench --routing-dir "$scratch/routing" \
      --json "$out/kiln.json" --probe ${PROBE:-1} --only "${ONLY:-}" --variants "${dec:-none}" \
      --prefill-variants "${pre:-none}" > "$out/bench.log" 2>&1
  echo "bench exit $?"
  grep -E '^probe|^HANG' "$out/bench.log"
fi

hl=$(( $(left) - 12 ))
if [[ -f "$out/kiln.json" && $hl -gt 40 ]]; then
  stamp "humming (limit $hl s)"
  export HUMMING_CACHE_DIR="$scratch/humming-cache" HUMMING_TMP_DIR="$scratch/humming-tmp" PYTHONUNBUFFERED=1
  mkdir -p "$HUMMING_CACHE_DIR" "$HUMMING_TMP_DIR"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$whl"/*.whl > /dev/null 2>&1
  export PYTHONPATH="$scratch/site"
  timeout -k 5 "$hl" python3 "$dir/bench-humming.py" --routing-dir "$scratch/routing" --kiln-json "$out/kiln.json" \
      --json "$out/humming.json" --iters 30 > "$out/humming.log" 2>&1
  echo "humming exit $?"
  grep "^# humming" "$out/humming.log" | cut -c1-150
else
  echo "humming: not run ($(left) s left)"
fi
stamp "done"
echo "passed variants: ${passed:-none}"
python3 "$dir/summary.py" "$out/kiln.json" "$out/humming.json" "$passed"
