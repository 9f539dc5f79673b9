#!/usr/bin/env bash
# One device-tool call for the batched decode attention (Backend::decode_attention_batch): the
# CudaDecodeBatch tests (+ CudaTqCache, CudaKv) of unit_backend_cuda, then bench_engine batch
# 1/8/32 at 8K with dense and 4-bit TurboQuant KV, and in the same run the per-sequence baseline
# (TQ_BATCH_DECODE=0) at batch 8/32. Carry [".gpu/h6.tar.xz", ".gpu/lib"]: the archive holds
# bench_engine, unit_backend_cuda, tqserve (make-model) and their lib/ (docs/gpu.md's recipe).
# Logs under $OUT; the tables are printed last. Build the archive from committed code only (the
# shared working tree may hold others' half-done kernels): git archive HEAD | tar -x -C /tmp/t,
# build bench_engine + unit_backend_cuda there, strip both next to tqserve and lib/ from
# .gpu/e2e.tar.xz, XZ_OPT=-1 tar -cJf .gpu/h6.tar.xz.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
OUT=${OUT:-/tmp/out}
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
TOKENS=${TOKENS:-32}
mkdir -p "$OUT" /tmp/h6 && tar -C /tmp/h6 -xJf .gpu/h6.tar.xz || { echo "no .gpu/h6.tar.xz"; exit 1; }
LD_LIBRARY_PATH=/tmp/h6/lib:$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
t0=$SECONDS
/tmp/h6/tqserve make-model --like qwen3-8b --random --out "$M" --force \
  --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 &
MP=$!
timeout 60 /tmp/h6/unit_backend_cuda --gtest_filter='CudaDecodeBatch.*:CudaTqCache.*:CudaKv.*' \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$? [$((SECONDS - t0)) s]"
wait $MP || { tail -5 "$OUT/make_model.log"; exit 1; }
echo "make-model done [$((SECONDS - t0)) s]"
B=/tmp/h6/bench_engine
timeout 80 "$B" --model "$M" --device cuda --context 8192 --tokens "$TOKENS" --batch 1,8,32 \
  --kv dense,turboquant --copy-prefill > "$OUT/batch.md" 2> "$OUT/batch.err"
echo "batched rc=$? [$((SECONDS - t0)) s]"; tail -3 "$OUT/batch.err"
TQ_BATCH_DECODE=0 timeout 60 "$B" --model "$M" --device cuda --context 8192 --tokens "$TOKENS" \
  --batch 8,32 --kv dense,turboquant --copy-prefill > "$OUT/baseline.md" 2> "$OUT/baseline.err"
echo "baseline rc=$? [$((SECONDS - t0)) s]"; tail -3 "$OUT/baseline.err"
grep -E "^\[decode-batch\]|^\[  FAILED|Failure|^\[  PASSED" "$OUT/tests.log" | head -40
echo; echo "## batched decode attention (8K context, $TOKENS steps)"; cat "$OUT/batch.md"
echo; echo "## per-sequence baseline (TQ_BATCH_DECODE=0), same run"; cat "$OUT/baseline.md"
