#!/usr/bin/env bash
# One device-tool call for the batched decode step's launches (qk_norm_rope_rows + one
# kv_append_batch per layer): the CudaDecodeBatch / CudaKv / CudaTqCache tests, then bench_engine
# batch 1/8/32 at 8K with dense and 4-bit TurboQuant KV, and in the same run at batch 32 the
# baselines TQ_BATCH_APPEND=0 (per-sequence RoPE + appends, batched attention) and
# TQ_BATCH_DECODE=0 (all per sequence). Carry [".gpu/h9.tar.xz", ".gpu/lib"]: the archive holds
# tqserve, bench_engine, unit_backend_cuda and lib/ built from committed code (xz -9).
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
OUT=${OUT:-/tmp/out}
A=${ARCHIVE:-.gpu/h9.tar.xz}
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
TOKENS=${TOKENS:-32}
X=/tmp/batch_append
mkdir -p "$OUT" $X && tar -C $X -xJf "$A" || { echo "no $A"; exit 1; }
LD_LIBRARY_PATH=$X/lib:$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
t0=$SECONDS
$X/tqserve make-model --like qwen3-8b --random --out "$M" --force \
  --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 &
MP=$!
timeout 50 $X/unit_backend_cuda --gtest_filter='CudaDecodeBatch.*:CudaKv.*:CudaTqCache.*' \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$? [$((SECONDS - t0)) s]"
wait $MP || { tail -5 "$OUT/make_model.log"; exit 1; }
echo "make-model done [$((SECONDS - t0)) s]"
B=$X/bench_engine
run() {  # name, timeout, env..., then bench args after --
  local name=$1 lim=$2; shift 2
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout "$lim" "$B" --model "$M" --device cuda --context 8192 \
    --tokens "$TOKENS" --copy-prefill "$@" > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name rc=$? [$((SECONDS - t0)) s]"; tail -2 "$OUT/$name.err"
}
run batched 70 -- --batch 1,8,32 --kv dense,turboquant
run no_batch_append 30 TQ_BATCH_APPEND=0 -- --batch 32 --kv dense,turboquant
run no_batch_decode 30 TQ_BATCH_DECODE=0 -- --batch 32 --kv dense,turboquant
grep -E "^\[(decode|append)-batch\]|^\[  FAILED|Failure|^\[  PASSED|tests, listed" "$OUT/tests.log" | tail -30
echo; echo "## batched step (rows RoPE + batched append + batched attention), 8K, $TOKENS steps"
cat "$OUT/batched.md"
echo; echo "## same run, B=32, TQ_BATCH_APPEND=0 (per-sequence RoPE + appends)"; cat "$OUT/no_batch_append.md"
echo; echo "## same run, B=32, TQ_BATCH_DECODE=0 (all per sequence)"; cat "$OUT/no_batch_decode.md"
