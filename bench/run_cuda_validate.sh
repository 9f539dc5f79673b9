#!/usr/bin/env bash
# One device-tool call: `tqserve validate --device cuda` on tiny-qwen3 (dense / ordinary /
# mid-prefill at 4/4, the width the GPU keeps; each cell a supervised child on the GPU) at
# 4,096-token documents and at 16,384, then the 8/8 + 4/4 matrix at 4,096 on the machine's CPU
# (the reference backend: the same-run baseline), and that --widths 8/8 is refused on the GPU.
# tqserve, its libraries and tiny-qwen3's model files come in .gpu/e2e.tar.xz
# (`ONLY=e2e bash bench/pack_cuda_archives.sh`); carry [".gpu/e2e.tar.xz", ".gpu/lib"].
# Reports under $OUT/val-*; the tables are printed last. RUNS (default
# "cuda:4096 cuda:16384 cpu:4096"; the call stops at STOP_AT, default 570 s) picks device:tokens pairs.
# LIKE=qwen3-8b runs them on a random-weight model of that shape instead (tqserve make-model,
# written to the device's disk; tokenizer from models/micro-qwen3); VARGS adds validate flags
# (e.g. "--texts 1 --needle-docs 2 --prefill-chunk 4096").
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/e2e && tar -C /tmp/e2e -xJf .gpu/e2e.tar.xz
LD_LIBRARY_PATH=/tmp/e2e/lib:$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
T=/tmp/e2e/tqserve
M=${MODEL:-/tmp/e2e/models/tiny-qwen3}
if [ -n "${LIKE:-}" ]; then
  M=/tmp/m-$LIKE t0=$SECONDS
  $T make-model --like "$LIKE" --random --out "$M" --force --tokenizer-from models/micro-qwen3 \
    > "$OUT/make_model.log" 2>&1 || { tail -5 "$OUT/make_model.log"; exit 1; }
  echo "make-model --like $LIKE: $((SECONDS - t0)) s" >> "$OUT/summary.txt"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
RUNS=${RUNS:-cuda:4096 cuda:16384 cpu:4096}
# The GPU keeps 4-bit TurboQuant only: its default matrix is 4/4, and 8/8 is refused up front.
$T validate --device cuda --model "$M" --out /tmp/val-refused --widths 8/8 > "$OUT/refused.txt" 2>&1
echo "--widths 8/8 --device cuda: rc=$? ($(tail -1 "$OUT/refused.txt"))" >> "$OUT/summary.txt"
for r in $RUNS; do
  d=${r%:*} n=${r#*:} t0=$SECONDS
  w=$([ "$d" = cpu ] && echo "--widths 8/8,4/4")
  timeout $((${STOP_AT:-570} - SECONDS)) $T validate --device "$d" --model "$M" --out "/tmp/val-$d-$n" --tokens "$n" \
    $w ${VARGS:-} --quiet > "$OUT/val-$d-$n.txt" 2> "$OUT/val-$d-$n.err"
  echo "$d $n tokens: rc=$? in $((SECONDS - t0)) s" >> "$OUT/summary.txt"
  mkdir -p "$OUT/val-$d-$n" && cp /tmp/val-$d-$n/report.* "$OUT/val-$d-$n/" 2>/dev/null
done
for r in $RUNS; do tail -3 "$OUT/val-${r%:*}-${r#*:}.err"; grep "^|" "$OUT/val-${r%:*}-${r#*:}.txt" | head -7; done
cat "$OUT/summary.txt"
