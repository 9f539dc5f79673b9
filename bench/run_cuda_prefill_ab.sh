#!/usr/bin/env bash
# One device-tool call: prefill attention builds against each other and PyTorch SDPA, same run.
# VARIANTS: space-separated "tag=binary" or "tag=binary:ENV=VAL[,ENV=VAL]" entries, each a
# bench_cuda_prefill binary (.xz accepted) run ROUNDS times (default 2), the variants alternating
# within a round so clock and thermal drift hit all alike; every run writes its rows tagged
# "_tag_round" to a CSV, and bench/bench_cuda_sdpa_prefill.py merges them with the SDPA baseline
# measured after them into $OUT/table.md (printed last).
# BENCH_ARGS: extra bench_cuda_prefill flags for every run (e.g. --records, --quick).
# TESTS="binary filter[;binary filter ...]": test binaries (.xz accepted) run first, each with its
# gtest filter (logs $OUT/tests.log, tests2.log, ...).
# Carry the binaries and ".gpu/lib" (libfmt; bench/pack_cuda_archives.sh).
# Example: VARIANTS="base=.gpu/base.xz new=.gpu/new.xz one=.gpu/new.xz:TQ_X=1" \
#   bash bench/run_cuda_prefill_ab.sh
set -o pipefail
W=/tmp/pab
# shellcheck source=bench/device_common.sh
. "$(dirname "$0")/device_common.sh"
[ -n "${VARIANTS:-}" ] || { echo "VARIANTS is empty"; exit 2; }
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv > "$OUT/smi.txt"
if [ -n "${TESTS:-}" ]; then
  IFS=';' read -ra test_sets <<< "$TESTS"
  n=0
  for ts in "${test_sets[@]}"; do
    n=$((n + 1)); log="$OUT/tests.log"; [ $n -gt 1 ] && log="$OUT/tests$n.log"
    read -r tb tf <<< "$ts"
    tb=$(unpack "$tb")
    timeout "${TEST_TIMEOUT:-120}" "$tb" --gtest_filter="$tf" > "$log" 2>&1
    rc=$?
    echo "tests $n ($(basename "$tb") $tf) rc=$rc [$((SECONDS - t0)) s]"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|SKIPPED \]" "$log" | head -20
  done
fi
csvs=""
for r in $(seq "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    tag=${v%%=*} rest=${v#*=}
    bin=${rest%%:*} envs=""
    [ "$rest" != "$bin" ] && envs=${rest#*:}
    b=$(unpack "$bin")
    c="$W/${tag}_$r.csv"
    # shellcheck disable=SC2086  # envs are words
    timeout 120 env ${envs//,/ } "$b" ${BENCH_ARGS:-} --tag "_${tag}_$r" --csv "$c" >> "$OUT/bench.log" 2>&1 ||
      echo "variant $tag round $r failed (rc=$?)"
    csvs="$csvs${csvs:+,}$c"
  done
done
echo "variants [$((SECONDS - t0)) s]"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/bench_cuda_sdpa_prefill.py "$csvs" "$OUT/table.md" > "$OUT/sdpa.log" 2>&1 ||
  { echo "sdpa baseline failed"; tail -5 "$OUT/sdpa.log"; }
echo "sdpa [$((SECONDS - t0)) s]"
cat "$OUT/smi.txt"
grep -E "^records|^chunk|-rec |-chunk " "$OUT/bench.log"
cat "$OUT/table.md"
