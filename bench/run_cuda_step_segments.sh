#!/usr/bin/env bash
# One device-tool call: the per-layer critical path of batch-1 decode steps on the
# Qwen3-8B-shaped random model (512-token context, dense and TQ4), from CUPTI kernel traces
# (bench/cupti_trace.cpp, built here) split by bench/step_segments.py. VARIANTS adds same-run
# rows under env switches, e.g. VARIANTS="TQ_GEMV_CARVEOUT=-1 TQ_DECODE_PDL=0" (space-separated
# assignments of one variant; ';' separates variants). Carry [".gpu/e2e.tar.xz", ".gpu/lib"]
# (docs/gpu.md). Prints one line per run: the median of each segment over ~315 layers, in us.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
OUT=${OUT:-/tmp/out}
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
TR=/tmp/segments
mkdir -p "$OUT" /tmp/e2e "$TR"
tar -C /tmp/e2e -xJf .gpu/e2e.tar.xz || { echo "no .gpu/e2e.tar.xz"; exit 1; }
LD_LIBRARY_PATH=/tmp/e2e/lib:$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
CUPTI=$(find "$CUDA_HOME" /usr/local -name libcupti.so 2>/dev/null | head -1)
g++ -O2 -shared -fPIC -I"$CUDA_HOME/include" bench/cupti_trace.cpp -L"$(dirname "$CUPTI")" -lcupti \
  -o /tmp/libcupti_trace.so || { echo "cupti_trace did not build"; exit 1; }
[ -f "$M/config.json" ] || /tmp/e2e/tqserve make-model --like qwen3-8b --random --out "$M" --force \
  --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
trace() {  # tag, kv, env assignments...
  local tag=$1 kv=$2; shift 2
  env "$@" LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$CUPTI")" \
    CUDA_INJECTION64_PATH=/tmp/libcupti_trace.so TQ_TRACE_OUT="$TR/$tag.csv" \
    timeout ${RUN_S:-60} /tmp/e2e/bench_engine --model "$M" --device cuda --context 512 --tokens 8 \
    --chunk 512 --batch 1 --kv "$kv" > "$TR/$tag.log" 2>&1 || echo "$tag failed (see $TR/$tag.log)"
}
for kv in dense turboquant; do trace "${kv}" "$kv" A=1; done
i=0
IFS=';' read -ra VS <<< "${VARIANTS:-}"
for v in "${VS[@]}"; do
  i=$((i + 1))
  read -ra assigns <<< "$v"
  [ ${#assigns[@]} -gt 0 ] || continue
  for kv in dense turboquant; do trace "${kv}_v$i" "$kv" "${assigns[@]}"; done
  echo "v$i: $v"
done
python3 bench/step_segments.py "$TR"/*.csv | tee "$OUT/segments.txt"
tar -C "$TR" -czf "$OUT/segments.tgz" .
