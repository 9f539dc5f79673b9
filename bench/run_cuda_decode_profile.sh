#!/usr/bin/env bash
# One device-tool call: where batch-1 decode time goes on the Qwen3-8B-shaped random model.
# Runs the GEMV / fused-op tests (TQ_GEMV=2 and =1) while the model is written, an nsys profile
# of `tqserve generate` (128-token prompt, 48 new tokens) with the v1 and the staged v2 GEMV and
# per-step breakdowns (bench/nsys_decode_steps.py: step wall, kernel time per (kernel, grid),
# gaps, host API time) -- or, without nsys, Nsight Compute on one decode layer's 12 launches --
# then decode tok/s without a profiler for the env variants (docs/gpu.md). ARCHIVE (default
# .gpu/h7.tar.xz): tqserve, unit_backend_cuda and lib/ as in docs/gpu.md; carry it and .gpu/lib.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
M=${MODEL_DIR:-/tmp/m}
mkdir -p "$OUT" /tmp/h7
A=${ARCHIVE:-.gpu/h7.tar.xz}
tar -C /tmp/h7 -xJf "$A" || { echo "no $A"; exit 1; }
export LD_LIBRARY_PATH=/tmp/h7/lib:$LD_LIBRARY_PATH
T=/tmp/h7/tqserve
# The tests (GEMV variants against the composed ops) run while the model is written.
( for g in 2 1; do
    TQ_GEMV=$g timeout 60 /tmp/h7/unit_backend_cuda --gtest_filter='CudaKv.*:CudaOps.*' \
      > "$OUT/tests_gemv$g.txt" 2>&1
    echo "tests TQ_GEMV=$g rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_gemv$g.txt" | tr '\n' ' ')"
  done ) > /tmp/h7/tests.txt 2>&1 &
TP=$!
t0=$SECONDS
$T make-model --like qwen3-8b --random --out "$M" --force --tokenizer-from models/micro-qwen3 \
  > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
echo "model written [$((SECONDS - t0)) s]"; wait $TP; cat /tmp/h7/tests.txt
IDS=$(python3 -c "print(','.join(str(10 + (i * 7919) % 90) for i in range(128)))")
gen() {  # tag, env...
  local tag=$1; shift
  env "$@" timeout 60 $T generate --model "$M" --device cuda --prompt-ids "$IDS" --max-tokens 128 \
    --ignore-eos --json > "/tmp/h7/$tag.json" 2> "/tmp/h7/$tag.err"
  echo "$tag rc=$? $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('decode tok/s %.1f' % j['decode_tokens_per_s'])" "/tmp/h7/$tag.json" 2>/dev/null)" | tee -a "$OUT/runs.txt"
}
NSYS=$(command -v nsys || find /usr /opt -name nsys -type f -perm -u+x 2>/dev/null | grep -m1 bin/nsys)
echo "nsys: ${NSYS:-none}; ncu: $(command -v ncu || echo none)"
prof() {  # tag, env...
  local tag=$1; shift
  [ -n "$NSYS" ] || return 0
  [ $SECONDS -gt 110 ] && { echo "skip nsys $tag (time)"; return 0; }
  local t0=$SECONDS
  env "$@" timeout 60 "$NSYS" profile -t cuda -o "/tmp/h7/$tag" --force-overwrite true \
    $T generate --model "$M" --device cuda --prompt-ids "$IDS" --max-tokens 48 --ignore-eos --json \
    > "/tmp/h7/$tag.gen.json" 2> "/tmp/h7/$tag.nsys.err"
  echo "nsys $tag rc=$? [$((SECONDS - t0)) s]"
  timeout 25 "$NSYS" export --type sqlite --force-overwrite true -o "/tmp/h7/$tag.sqlite" \
    "/tmp/h7/$tag.nsys-rep" > /dev/null 2>&1
  python3 bench/nsys_decode_steps.py "/tmp/h7/$tag.sqlite" > "$OUT/steps_$tag.txt" 2>&1
  timeout 25 "$NSYS" stats -r cuda_gpu_kern_sum,cuda_api_sum -f column "/tmp/h7/$tag.nsys-rep" \
    > "$OUT/stats_$tag.txt" 2>&1
  echo "[$((SECONDS - t0)) s]"
}
NCU=$(command -v ncu || find /usr /opt -name ncu -type f -perm -u+x 2>/dev/null | head -1)
if [ -z "$NSYS" ] && [ -n "$NCU" ]; then  # fallback: one layer's kernels of a decode step
  for g in 1 2; do
    TQ_GEMV=$g timeout 60 "$NCU" --launch-skip 3000 --launch-count 12 --section SpeedOfLight \
      $T generate --model "$M" --device cuda --prompt-ids "$IDS" --max-tokens 16 --ignore-eos \
      > "$OUT/ncu_gemv$g.txt" 2>&1
    grep -E "gemv|Duration|DRAM Throughput|Memory Throughput|^  [a-z_]+.*\(" "$OUT/ncu_gemv$g.txt" | head -60
  done
fi
prof v1 TQ_GEMV=1
prof v2 TQ_GEMV=2
for v in "v1 TQ_GEMV=1" "v2 TQ_GEMV=2" "v2_grid0 TQ_GEMV=2 TQ_GEMV_GRID=0" \
         "v2_nopdl TQ_GEMV=2 TQ_GEMV_PDL=0" "v2_rows8 TQ_GEMV=2 TQ_GEMV_ROWS=8" \
         "v1_again TQ_GEMV=1"; do
  [ $SECONDS -gt 165 ] && { echo "skip $v (time)"; continue; }
  gen $v
done
for f in "$OUT"/steps_*.txt; do echo "== $f"; head -60 "$f"; done
cat "$OUT/runs.txt"
