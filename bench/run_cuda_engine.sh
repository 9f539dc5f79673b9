#!/usr/bin/env bash
# One device-tool call: batch decode on the GPU through the engine's step (bench_engine) on the
# Qwen3-8B-shaped random model: batch 1 / 8 / 32 at 8K context with dense and 4-bit TurboQuant KV
# (issue 10: batch 32 at 8K with 4-bit KV >= 2,000 tok/s), then the mid-prefill conversion cost
# at 32K (forced conversion at 16K vs a dense prefill of the same prompt, same run).
# tqserve (for make-model) and its libraries come in .gpu/e2e.tar.xz (docs/gpu.md); bench_engine
# needs the same libraries: pack it into that archive, or put it in .gpu/bin.
# Carry [".gpu/e2e.tar.xz", ".gpu/lib"] (+ ".gpu/bin" when bench_engine is there).
# Writes at most 6 files under $OUT; the table is printed last. SERVE_ONLY=1: instead, a
# `tqserve serve --device cuda --memory-guard` smoke (one completion, the guard's GPU metrics). A dry run on the CPU:
#   BENCH=build/bench/bench_engine DEVICE=cpu MODEL_DIR=models/micro-qwen3 CONTEXT=256 \
#   MID_CONTEXT=1024 MID_AT=512 CHUNK=256 OUT=/tmp/eng bash bench/run_cuda_engine.sh
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
DEVICE=${DEVICE:-cuda}
CONTEXT=${CONTEXT:-8192}
TOKENS=${TOKENS:-64}
CHUNK=${CHUNK:-4096}
MID_CONTEXT=${MID_CONTEXT:-32768}
MID_AT=${MID_AT:-16384}
mkdir -p "$OUT" /tmp/e2e
B=${BENCH:-}
if [ -z "$B" ]; then
  tar -C /tmp/e2e -xJf .gpu/e2e.tar.xz || { echo "no .gpu/e2e.tar.xz (docs/gpu.md)"; exit 1; }
  export LD_LIBRARY_PATH=/tmp/e2e/lib:$LD_LIBRARY_PATH
  B=/tmp/e2e/bench_engine
  [ -x "$B" ] || B=$R/.gpu/bin/bench_engine
fi
[ -x "$B" ] || { echo "bench_engine is neither in .gpu/e2e.tar.xz nor in .gpu/bin"; exit 1; }
if [ ! -f "$M/config.json" ]; then
  /tmp/e2e/tqserve make-model --like qwen3-8b --random --out "$M" --force \
    --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 ||
    { cat "$OUT/make_model.log"; exit 1; }
fi
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ "${SERVE_ONLY:-0}" = 1 ]; then
  # `tqserve serve --device cuda` smoke (a separate call): one completion, then the guard's view of
  # the GPU from /metrics (limit = total minus the reserve, used = the backend's allocations).
  PORT=${PORT:-18080}
  ${TQSERVE:-/tmp/e2e/tqserve} serve --model "$M" --device "$DEVICE" --memory-guard --ctx-size 8192 \
    --port "$PORT" --served-model-name m --no-access-log > "$OUT/serve.log" 2>&1 &
  SP=$!
  for _ in $(seq 1 120); do grep -q listening "$OUT/serve.log" && break; sleep 1; done
  python3 - "$PORT" <<'PY' 2>&1 | tee "$OUT/serve_smoke.txt"
import json, sys, urllib.request
port = sys.argv[1]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
    headers={"Content-Type": "application/json"},
    data=json.dumps({"model": "m", "prompt": "the quick brown fox " * 400, "max_tokens": 16}).encode())
try:
    r = json.load(urllib.request.urlopen(req, timeout=120))
    print("completion:", r["usage"])
except Exception as e:
    print("completion failed:", e)
m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
for line in m.splitlines():
    if line.startswith(("tq_guard_limit_bytes", "tq_guard_used_bytes", "tq_guard_peak_used_bytes", "tq_memory_bytes")):
        print(line)
PY
  kill "$SP"; wait "$SP"; echo "serve rc=$?"; tail -5 "$OUT/serve.log"
  exit 0
fi
# Each run loads the model once; --kv and --batch lists run in the same process. Sequences 1..N-1
# get a copy of sequence 0's prefilled cache (--copy-prefill): the decode figures need N caches
# of the context's length, not N prefills; prefill tok/s is the 8K prefill of sequence 0.
t0=$SECONDS
timeout 330 "$B" --model "$M" --device "$DEVICE" --context "$CONTEXT" --tokens "$TOKENS" --chunk "$CHUNK" \
  --batch 1,8,32 --kv dense,turboquant --copy-prefill > "$OUT/batch.md" 2> "$OUT/batch.err"
echo "batch decode rc=$? [$((SECONDS - t0)) s]"; tail -3 "$OUT/batch.err"
t0=$SECONDS
timeout 200 "$B" --model "$M" --device "$DEVICE" --mid-prefill --context "$MID_CONTEXT" \
  --convert-at "$MID_AT" --chunk "$CHUNK" > "$OUT/mid_prefill.md" 2> "$OUT/mid_prefill.err"
echo "mid-prefill rc=$? [$((SECONDS - t0)) s]"; tail -3 "$OUT/mid_prefill.err"
echo; echo "## batch decode, ${CONTEXT}-token context, $TOKENS steps ($DEVICE, $(date -u +%F))"
cat "$OUT/batch.md"
echo; echo "## mid-prefill conversion at $MID_CONTEXT (forced at $MID_AT) vs dense"
cat "$OUT/mid_prefill.md"
