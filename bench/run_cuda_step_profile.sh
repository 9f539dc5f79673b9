#!/usr/bin/env bash
# One device-tool call: where a decode step's time goes on the Qwen3-8B-shaped random model.
# bench_engine's batch 1 / 32 decode rows at 8K (dense and TQ4) without a profiler, then a CUPTI
# kernel trace (bench/cupti_trace.cpp, built on the device; PROFILER=ncu: Nsight Compute's
# per-kernel time instead, kernels serialized) of a few decode steps of batch 1 (short context,
# dense and TQ4) and of batch 32 TQ4 at 8K, summarized by bench/step_summary.py (step wall time,
# GPU busy / idle, time per kernel). Carry [".gpu/e2e.tar.xz", ".gpu/lib"] (docs/gpu.md).
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
OUT=${OUT:-/tmp/out}
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
TR=/tmp/traces  # traces and summaries, returned as one $OUT/traces.tgz (8 files come back)
mkdir -p "$OUT" /tmp/e2e "$TR"
tar -C /tmp/e2e -xJf .gpu/e2e.tar.xz || { echo "no .gpu/e2e.tar.xz"; exit 1; }
LD_LIBRARY_PATH=/tmp/e2e/lib:$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
B=/tmp/e2e/bench_engine
NCU=$(command -v ncu || find /usr /opt -name ncu -type f -perm -u+x 2>/dev/null | head -1)
t0=$SECONDS
[ -f "$M/config.json" ] || /tmp/e2e/tqserve make-model --like qwen3-8b --random --out "$M" --force \
  --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
echo "model [$((SECONDS - t0)) s]"
[ "${ENGINE:-1}" = 1 ] && timeout ${ENGINE_S:-150} $B --model "$M" --device cuda --context 8192 --tokens 32 --chunk 4096 \
  --batch ${BATCHES:-1,32} --kv dense,turboquant --copy-prefill > "$OUT/engine.md" 2>&1
echo "engine rc=$? [$((SECONDS - t0)) s]"
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
CUPTI=$(find "$CUDA_HOME" /usr/local -name libcupti.so 2>/dev/null | head -1)
g++ -O2 -shared -fPIC -I"$CUDA_HOME/include" bench/cupti_trace.cpp -L"$(dirname "$CUPTI")" -lcupti \
  -o /tmp/libcupti_trace.so || { echo "cupti_trace did not build"; PROFILER=ncu; }
LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$CUPTI")
export LD_LIBRARY_PATH
prof() {  # tag, args...
  local tag=$1; shift
  if [ "${PROFILER:-cupti}" = ncu ]; then
    timeout ${PROF_S:-60} "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$@" > "$TR/trace_$tag.csv" 2> "$TR/trace_$tag.err"
  else
    CUDA_INJECTION64_PATH=/tmp/libcupti_trace.so TQ_TRACE_OUT="$TR/trace_$tag.csv" \
      timeout ${PROF_S:-60} "$@" > "$TR/trace_$tag.log" 2>&1
  fi
  echo "$tag rc=$? [$((SECONDS - t0)) s]"
  python3 bench/step_summary.py "$TR/trace_$tag.csv" --steps 3 > "$TR/steps_$tag.md" 2>&1
}
# Same-run baseline of a switch (e.g. BASE_ENV="TQ_GEMV_SWIGLU_PAIRS=0"): batch 1 traced again.
[ -n "${BASE_ENV:-}" ] && prof b1base env $BASE_ENV $B --model "$M" --device cuda --context 512 \
  --tokens 8 --chunk 512 --batch 1 --kv dense
prof b1 $B --model "$M" --device cuda --context 512 --tokens 8 --chunk 512 --batch 1 --kv dense
prof b1tq $B --model "$M" --device cuda --context 512 --tokens 8 --chunk 512 --batch 1 --kv turboquant
prof b1tq32k $B --model "$M" --device cuda --context 32768 --tokens 8 --chunk 4096 --batch 1 --kv turboquant
prof b32tq $B --model "$M" --device cuda --context 8192 --tokens 8 --chunk 4096 --batch 32 \
  --kv turboquant --copy-prefill
tar -C "$TR" -czf "$OUT/traces.tgz" .
for f in "$TR"/steps_*.md; do echo "== $f"; head -${TOP:-16} "$f"; done
grep "|" "$OUT/engine.md"
